"""`/dockyard approve`: a named approver lets a PR head's policy violations through.

Called by the PR bot (`reconciler.pr.bot`) for a comment on a GitHub pull request or a
note on a GitLab merge request (`approvalhooks` reads the webhook payloads). The payload
only says which comment to look at: the comment is read back by id from the host's API and
its author is the API's word, never the payload's. Then the PR head is read from the API
(it must be the head the approver named or saw, when known), the *deployed* `.dockyard.yml`
(at the project's last applied revision, `engine.deployedpolicy`: never the PR head's, which
its author wrote) must name that author in `policy.approvers`, and the head's plan must
break the policy; the approval
is recorded for the head's git *tree* (the content approved; GitHub's API says it, GitLab's
root listing is hashed to it) and the PR is planned again, so the comment says who
approved which violations and `dockyard/plan` passes. A new push is a new tree: it needs a
new approval. The reconcile of a merge with that same tree applies the runs
(docs/policies.md). An approval that does not count is answered on the PR with a short
comment saying who tried and why.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.adapters.db.store import Store
from reconciler.core.policy import PolicyRules
from reconciler.domain.approvals import Approval
from reconciler.engine.deployedpolicy import RulesAt
from reconciler.engine.previewing import Previewer
from reconciler.pr.commenting import PLAN_CONTEXT
from reconciler.pr.hosting import CodeHost
from reconciler.pr.liveplan import plan_files
from reconciler.pr.posting import post_plan
from reconciler.pr.reviewing import PlanReport, wanted_path
from stacks.catalog import CatalogRow

log = logging.getLogger(__name__)

COMMAND = "/dockyard approve"
_LINE = re.compile(r"^/dockyard approve(?:\s+([0-9a-fA-F]{7,64}))?$")
_SCANNED = 10_000
"""Characters of a comment searched for the command."""


def approve_command(body: str) -> tuple[bool, str | None]:
    """Whether a comment asks for an approval (a line `/dockyard approve`, optionally with
    the head commit's SHA or a prefix of it: `/dockyard approve 1a2b3c4`), and that SHA."""
    for line in body[:_SCANNED].splitlines():
        match = _LINE.match(line.strip())
        if match is not None:
            return True, match.group(1).lower() if match.group(1) else None
    return False, None


def is_approve_command(body: str) -> bool:
    return approve_command(body)[0]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A comment on pull request `number` of `repo` that may be `/dockyard approve`."""

    repo: str
    number: int
    comment_id: int
    project: str
    subdir: str = ""
    seen_head: str | None = None
    """The head commit the approver saw when commenting (GitLab's note says it), if known."""
    key: str = ""
    """The plan comment's marker key and status context re-posted once approved: a
    source's own (`BotConfig.key`, `plan_context`), or the `--repo` bot's."""
    context: str = PLAN_CONTEXT
    default_project: str | None = None
    """The project when the head's `.dockyard.yml` names none (a source's; None: `main`)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `approve` did: `counted`, or why not (`reply`: the answer posted on the PR)."""

    counted: bool
    text: str
    reply: str | None = None


def refusal(author: str, why: str, command: str = COMMAND) -> str:
    """The short answer to a command (`/dockyard approve`, `/dockyard preview`) that did
    not count. It starts with the command in backticks, so it is never a command line
    itself: the bot's answer never asks the bot again."""
    return f"`{command}` from @{author} did not count: {why}."


async def approve(
    store: Store,
    host: CodeHost,
    request: ApprovalRequest,
    previewer: Previewer | None,
    catalog: Sequence[CatalogRow],
    deployed: RulesAt,
) -> Outcome:
    """Check the comment through the host's API, record the approval, re-post the plan;
    an approval that does not count is answered on the PR (see the module docstring).
    `deployed`: the repo policy's rules at a revision (the server's config repo)."""
    comment = await asyncio.to_thread(host.read_comment, request.number, request.comment_id)
    asked, named = approve_command(comment.body)
    if not asked:
        return Outcome(False, f"comment {comment.id} is not {COMMAND}")
    planner = _Planner(store, request, previewer, catalog, deployed)
    outcome = await _check_and_record(planner, host, (comment.author, comment.id, named))
    if outcome.reply is not None:
        await asyncio.to_thread(host.create_comment, request.number, outcome.reply)
    return outcome


@dataclass(frozen=True, slots=True)
class _Planner:
    """Plans the PR head's files for `request` (the server's plan function)."""

    store: Store
    request: ApprovalRequest
    previewer: Previewer | None
    catalog: Sequence[CatalogRow]
    deployed: RulesAt

    def deployed_rules(self) -> tuple[PolicyRules, str | None]:
        """The rules at the project's last applied revision, and that revision."""
        project_id = self.store.project_id_of(self.request.project)
        base = self.store.last_applied_revision(project_id) if project_id is not None else None
        return self.deployed(self.request.project, base), base

    async def plan(
        self, files: Mapping[str, bytes], sha: str, tree: str | None = None
    ) -> PlanReport:
        return await plan_files(
            self.store,
            self.request.project,
            files,
            commit=sha,
            subdir=self.request.subdir,
            previewer=self.previewer,
            catalog=self.catalog,
            tree=tree,
            deployed=self.deployed,
            default_project=self.request.default_project,
        )


async def _check_and_record(
    planner: _Planner, host: CodeHost, said: tuple[str, int, str | None]
) -> Outcome:
    """`said`: the comment's author and id as the API says them, and the head it names."""
    author, comment_id, named = said
    request = planner.request
    sha = await asyncio.to_thread(host.head_sha, request.number)
    for wanted in (named, request.seen_head):
        if wanted and not sha.lower().startswith(wanted.lower()):
            why = f"it approves {wanted[:12]}, but the head is now {sha[:12]}: approve the new head"
            return Outcome(False, why, refusal(author, why))
    rules, base = await asyncio.to_thread(planner.deployed_rules)
    if not rules.may_approve(author):
        where = f"at {base[:12]}" if base else "(nothing is applied yet)"
        why = (
            f"{author} is not in `policy.approvers` of the deployed `.dockyard.yml` {where}; "
            "a pull request cannot name its own approvers"
        )
        return Outcome(False, why, refusal(author, why))
    files = await asyncio.to_thread(host.read_files, sha, wanted_path(request.subdir))
    tree = await asyncio.to_thread(host.commit_tree, sha)
    report = await planner.plan(files, sha)
    violations = tuple(v for a in report.plan.actions for v in a.violations)
    if not violations:
        why = f"the plan of {sha[:12]} breaks no policy rule, so there is nothing to approve"
        return Outcome(False, why, refusal(author, why))
    approval = Approval(
        project=request.project,
        tree=tree,
        head=sha,
        approver=author,
        provider=host.provider,
        repo=request.repo,
        number=request.number,
        comment_id=comment_id,
        violations=violations,
    )
    await asyncio.to_thread(planner.store.record_approval, approval)
    report = await planner.plan(files, sha, tree)
    await asyncio.to_thread(
        post_plan, host, request.number, report, sha=sha, key=request.key, context=request.context
    )
    return Outcome(True, f"{author} approved {len(violations)} violation(s) of {sha[:12]}")
