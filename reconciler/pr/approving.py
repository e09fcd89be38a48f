"""`/dockyard approve`: a named approver lets a PR head's policy violations through.

Called by the PR bot (`reconciler.pr.bot`) for a comment on a pull request. The payload
only says which comment to look at: the comment is read back by id from the host's API and
its author is the API's word, never the payload's. Then the PR head is read from the API,
its `.dockyard.yml` must name that author in `policy.approvers`, and its plan must break
the policy; the approval is recorded for the head's git *tree* (the content approved;
`reconciler.adapters.db.approvals`), and the PR is planned again, so the comment says who
approved which violations and `dockyard/plan` passes. A new push is a new tree: it needs a
new approval. The reconcile of a merge with that same tree applies the runs
(docs/policies.md).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from reconciler.adapters.db.store import Store
from reconciler.domain.approvals import Approval
from reconciler.engine.previewing import Previewer
from reconciler.pr.hosting import CodeHost
from reconciler.pr.liveplan import plan_files
from reconciler.pr.posting import post_plan
from reconciler.pr.reviewing import load_files, wanted_path
from schemas import parse_config

log = logging.getLogger(__name__)

COMMAND = "/dockyard approve"


def is_approve_command(body: str) -> bool:
    """Whether a comment asks for an approval: a line that is `/dockyard approve`."""
    return any(line.strip() == COMMAND for line in body[:10_000].splitlines())


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A comment on pull request `number` of `repo` that may be `/dockyard approve`."""

    repo: str
    number: int
    comment_id: int
    project: str
    subdir: str = ""


async def approve(
    store: Store, host: CodeHost, request: ApprovalRequest, previewer: Previewer | None
) -> str:
    """Check the comment through the host's API, record the approval, re-post the plan;
    returns what was done (or why nothing was)."""
    number = request.number
    comment = await asyncio.to_thread(host.read_comment, number, request.comment_id)
    if not is_approve_command(comment.body):
        return f"comment {comment.id} is not {COMMAND}"
    sha = await asyncio.to_thread(host.head_sha, number)
    files = await asyncio.to_thread(host.read_files, sha, wanted_path(request.subdir))
    policy = load_files(files, commit=sha, parse=parse_config, subdir=request.subdir).policy
    if not policy.policy.may_approve(comment.author):
        return f"{comment.author} is not in policy.approvers at {sha[:12]}"
    tree = await asyncio.to_thread(host.commit_tree, sha)
    report = await plan_files(
        store, request.project, files, commit=sha, subdir=request.subdir, previewer=previewer
    )
    violations = tuple(v for a in report.plan.actions for v in a.violations)
    if not violations:
        return f"the plan of {sha[:12]} breaks no policy rule: nothing to approve"
    approval = Approval(
        project=request.project,
        tree=tree,
        head=sha,
        approver=comment.author,
        provider=host.provider,
        repo=request.repo,
        number=number,
        comment_id=comment.id,
        violations=violations,
    )
    await asyncio.to_thread(store.record_approval, approval)
    report = await plan_files(
        store,
        request.project,
        files,
        commit=sha,
        subdir=request.subdir,
        previewer=previewer,
        tree=tree,
    )
    await asyncio.to_thread(post_plan, host, number, report, sha=sha)
    return f"{comment.author} approved {len(violations)} violation(s) of {sha[:12]}"
