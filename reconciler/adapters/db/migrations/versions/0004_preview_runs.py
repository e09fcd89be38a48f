"""preview_runs: the preview of each pull request that asked for one (docs/previews.md)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "preview_runs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("provider", sa.String(length=16), nullable=False),
        sa.Column("repo", sa.String(length=255), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("project", sa.String(length=100), nullable=False),
        sa.Column("preview_project", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("head", sa.String(length=64), nullable=False),
        sa.Column("requested_by", sa.String(length=255), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("fork", sa.Boolean(), nullable=False),
        sa.Column("hourly", sa.Float(), nullable=False),
        sa.Column("prices", sa.Text(), nullable=True),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("comment_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deployed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_preview_runs")),
        sa.UniqueConstraint(
            "provider", "repo", "number", name=op.f("uq_preview_runs_provider_repo_number")
        ),
        sa.UniqueConstraint("preview_project", name=op.f("uq_preview_runs_preview_project")),
    )
    op.create_index("ix_preview_runs_state", "preview_runs", ["state"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_preview_runs_state", table_name="preview_runs")
    op.drop_table("preview_runs")
