"""jobs.place_key: new jobs alike for placement are parked together

A job that finds no room on any instance of its project parks, in the same write, the new
jobs of the project whose `place_key` is its own (same requirements, same node count):
they join the waiting line as it did instead of each spending a pass of the jobs worker
to learn the same (`jobsteps.ParkLike`). Rows from before have none and are never parked
so: each still gets its own pass.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("place_key", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("place_key")
