"""Approvals of policy exceptions as named units of work (docs/policies.md), a part of `Store`.

`record_approval` is called by the PR bot once the host's API confirmed that a named
approver wrote `/dockyard approve`; `approvals_for` by every plan of a commit (PR plans
and the reconcile), with the commit's git tree: an approval counts for the content it
approved, whichever commit carries that tree (the PR head, or the merge of it).
"""

from __future__ import annotations

from sqlalchemy import select

from reconciler.adapters.db.models import ApprovalRow
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.approvals import Approval


def _domain(row: ApprovalRow) -> Approval:
    return Approval(
        project=row.project,
        tree=row.tree,
        head=row.head,
        approver=row.approver,
        provider=row.provider,
        repo=row.repo,
        number=row.number,
        comment_id=row.comment_id,
        violations=tuple(str(v) for v in row.violations or ()),
        approved_at=row.approved_at,
    )


class ApprovalsStore(StoreBase):
    """See the module docstring."""

    def record_approval(self, approval: Approval) -> bool:
        """Record `approval` (one transaction); False when that approver already approved
        that tree (the first approval stays)."""
        key = (
            ApprovalRow.project == approval.project,
            ApprovalRow.tree == approval.tree,
            ApprovalRow.approver == approval.approver,
        )
        with self.writing() as session:
            if session.scalar(select(ApprovalRow.id).where(*key)) is not None:
                return False
            session.add(
                ApprovalRow(
                    project=approval.project,
                    tree=approval.tree,
                    head=approval.head,
                    approver=approval.approver,
                    provider=approval.provider,
                    repo=approval.repo,
                    number=approval.number,
                    comment_id=approval.comment_id,
                    violations=list(approval.violations),
                    approved_at=self.now(),
                )
            )
        return True

    def approvals_for(self, project: str, tree: str) -> list[Approval]:
        """The approvals of project `project` for git tree `tree`, oldest first."""
        query = (
            select(ApprovalRow)
            .where(ApprovalRow.project == project, ApprovalRow.tree == tree)
            .order_by(ApprovalRow.approved_at, ApprovalRow.approver)
        )
        with self.reading() as session:
            return [_domain(row) for row in session.scalars(query)]
