"""Preview runs of a pull request: one record per (provider, repo, PR), and its runs' view.

A maintainer asks for a preview (`dockyard:preview` label or `/dockyard preview`); the
server deploys the PR head's services and dev environments into an ephemeral project and
tears it down when the PR closes, loses the label, or the TTL ends (docs/previews.md).
Written by `reconciler.adapters.db.previewruns`, decided by `reconciler.core.previewruns`,
driven by `reconciler.engine.previewruns` and `reconciler.pr.previews`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class PreviewState(StrEnum):
    ACTIVE = "active"
    """Deployed (or being deployed); torn down at `expires_at` at the latest."""
    STOPPING = "stopping"
    """Runs asked to stop and fleets to terminate; the project goes once they have."""
    CLOSED = "closed"
    """Torn down: nothing runs and the project is removed."""
    REFUSED = "refused"
    """Asked for but not deployed (budget, errors): `reason` says why; nothing runs."""


@dataclass(frozen=True, slots=True)
class PullRef:
    """One pull (merge) request on one host."""

    provider: str
    """`github` or `gitlab`."""
    repo: str
    number: int


@dataclass(frozen=True, slots=True)
class PreviewRun:
    """The preview of one pull request (the `preview_runs` row)."""

    pull: PullRef
    project: str
    """The config repo's project (where the preview's budget is counted)."""
    preview_project: str
    """The ephemeral project the runs live in (`<project>-pr-<n>`, GitLab `-mr-`)."""
    state: PreviewState
    head: str
    """The deployed (or refused) head commit."""
    requested_by: str
    """Who asked, as the host's API says (label actor or comment author)."""
    trigger: str
    """`label` or `comment`."""
    fork: bool
    hourly: float = 0.0
    """$/h of the deployed runs at their best offers (the budget counts it)."""
    prices: dict[str, float] = field(default_factory=dict)
    """Run name → its $/h."""
    notes: tuple[str, ...] = ()
    """Lines the comment shows: runs not deployed and why, a newer head not deployed."""
    reason: str = ""
    """Why it was refused or torn down."""
    comment_id: int | None = None
    deployed_at: datetime | None = None
    expires_at: datetime | None = None
    closed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PreviewRunStatus:
    """One run of a preview project as the comment shows it."""

    name: str
    kind: str
    status: str
    submitted_at: datetime | None
    ready: bool = False
    """A service whose replicas answer (the proxy routes to it)."""
