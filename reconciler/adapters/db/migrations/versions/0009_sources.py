"""sources: the config repos one server follows, one per project (docs/sources.md)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "sources",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("project_name", sa.String(length=100), nullable=False),
        sa.Column("repo", sa.Text(), nullable=False),
        sa.Column("branch", sa.String(length=200), nullable=False),
        sa.Column("paths", sa.Text(), nullable=False),
        sa.Column("fetch_interval", sa.Float(), nullable=True),
        sa.Column("suspended", sa.Boolean(), nullable=False),
        sa.Column("webhook_secret_ref", sa.Text(), nullable=True),
        sa.Column("credentials_ref", sa.Text(), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sources")),
        sa.UniqueConstraint("name", name=op.f("uq_sources_name")),
        sa.UniqueConstraint("project_name", name=op.f("uq_sources_project_name")),
    )


def downgrade() -> None:
    op.drop_table("sources")
