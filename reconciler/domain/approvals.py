"""An approval of a policy exception: who let which violations of a PR head through.

Recorded by the PR bot (`reconciler.pr.approving`) when a named approver comments
`/dockyard approve`, stored by `reconciler.adapters.db.approvals`, and read by every plan
of the same content: an approval is keyed by the git *tree* of the approved head commit,
so the merge commit whose tree is that tree counts as approved and any other content does
not (docs/policies.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Approval:
    project: str
    tree: str
    """The git tree (hex) of the approved head commit: the content approved."""
    head: str
    """The approved head commit's SHA."""
    approver: str
    """The approver's login as the host's API names the comment's author."""
    provider: str
    """`github` or `gitlab`."""
    repo: str
    number: int
    """The pull (merge) request."""
    comment_id: int
    violations: tuple[str, ...]
    """The violations the plan of that head showed when it was approved."""
    approved_at: datetime | None = None
