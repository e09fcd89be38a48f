"""Posting a plan on a pull request: one comment, updated in place, and `dockyard/plan`.

`post_plan` finds the PR's comment by its hidden marker and edits it, or creates it when
there is none, so a PR carries one plan comment however often it is pushed; then it sets
the `dockyard/plan` status on the head SHA (asked of the host when not given).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reconciler.pr.commenting import PLAN_CONTEXT, comment_body, marker, plan_status
from reconciler.pr.hosting import CodeHost, CommitStatus
from reconciler.pr.reviewing import PlanReport


@dataclass(frozen=True, slots=True)
class Posted:
    """What `post_plan` did: the comment (created or updated) and the status it set."""

    comment_id: int
    created: bool
    sha: str
    status: CommitStatus
    characters: int


def post_plan(
    host: CodeHost,
    number: int,
    report: PlanReport,
    *,
    sha: str | None = None,
    key: str = "",
    full_plan_url: str | None = None,
    status_url: str | None = None,
    context: str = PLAN_CONTEXT,
) -> Posted:
    """Upsert the plan comment on PR `number` and set `dockyard/plan` (or `context`, a
    source's own) on its head."""
    body = comment_body(report, limit=host.comment_limit, key=key, full_plan_url=full_plan_url)
    existing = host.find_comment(number, marker(key))
    if existing is None:
        comment = host.create_comment(number, body)
    else:
        comment = host.update_comment(number, existing.id, body)
    head = sha or host.head_sha(number)
    status = replace(plan_status(report, target_url=status_url or full_plan_url), context=context)
    host.set_status(head, status)
    return Posted(comment.id, existing is None, head, status, len(body))
