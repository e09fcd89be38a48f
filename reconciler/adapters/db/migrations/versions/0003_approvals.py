"""approvals: policy exceptions approved on a pull request, keyed by the head's git tree

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("tree", sa.String(length=64), nullable=False),
        sa.Column("head", sa.String(length=64), nullable=False),
        sa.Column("approver", sa.String(length=255), nullable=False),
        sa.Column("provider", sa.String(length=16), nullable=False),
        sa.Column("repo", sa.String(length=255), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("comment_id", sa.BigInteger(), nullable=False),
        sa.Column("violations", sa.Text(), nullable=False),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approvals")),
        sa.UniqueConstraint(
            "project", "tree", "approver", name=op.f("uq_approvals_project_tree_approver")
        ),
    )
    op.create_index("ix_approvals_project_tree", "approvals", ["project", "tree"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_approvals_project_tree", table_name="approvals")
    op.drop_table("approvals")
