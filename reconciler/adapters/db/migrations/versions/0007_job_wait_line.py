"""jobs.wait_rank and the indexes that keep the jobs worker's reads off the history

The claim and `next_due` read jobs by a positive list of active statuses on
`ix_jobs_status_due`, so finished jobs (every job ever run) are never walked; the wake of
waiting jobs walks `ix_jobs_waiting_line` in the line's order (services and dev
environments first: `wait_rank` 0) and stops at the first job that fits. Before, each
claim scanned the whole table and each wake sorted the whole queue.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("wait_rank", sa.Integer(), server_default="1", nullable=False))
    op.execute(
        "UPDATE jobs SET wait_rank = 0 WHERE run_id IN "
        "(SELECT id FROM runs WHERE run_type <> 'task')"
    )
    op.create_index("ix_jobs_status_due", "jobs", ["status", "due_at"])
    op.create_index("ix_jobs_waiting_line", "jobs", ["status", "wait_rank", "submitted_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_waiting_line", table_name="jobs")
    op.drop_index("ix_jobs_status_due", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("wait_rank")
