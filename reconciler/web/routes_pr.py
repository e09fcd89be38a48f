"""`POST /api/project/{project}/plan/files`: plan a commit's config files against live state.

`dockyard plan --server URL --token T` reads the config files of a commit in its own
checkout and posts them here, so a fork's PR is planned without giving the server access to
the fork. With the commit's git `tree` (the CLI sends it), the approvals recorded for that
content (`/dockyard approve`, docs/policies.md) count, as in the server's own PR plans; it
only changes what the plan shows: the reconcile of a merge uses its own commit's tree. The
answer is the PR plan JSON (`reconciler.pr.document`): the plan of docs/plan.md against
what is deployed, made by the reconcile's own plan function (stack previews of the
runtime's engines, blocked actions, drift), with each run's best offer and $/h and the
total change. Members
of the project (role `user`) may ask; nothing is written.

Also the GitHub webhook's pull-request part, used when the server has a GitHub token
(`reconciler.pr.bot`): `answer_pull_request` records a `pull_request` delivery and starts
planning it; `after_push` sets `dockyard/apply` pending once a push queued a reconcile.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from reconciler.adapters.db.readmodels.project import record_delivery, set_delivery
from reconciler.adapters.db.store import Store
from reconciler.api.models import WebhookAnswer
from reconciler.api.requests import Body
from reconciler.domain.history import NewDelivery
from reconciler.engine.deployedpolicy import RulesAt, no_rules
from reconciler.engine.previewing import Previewer
from reconciler.errors import UsageError
from reconciler.pr.bot import PullRequestBot
from reconciler.pr.document import report_to_json
from reconciler.pr.liveplan import plan_files
from reconciler.web.auth import ProjectAccess, project_access
from reconciler.web.context import WebContext, get_context
from reconciler.web.hookparsing import HookEvent, PayloadError, load_object

MAX_FILES = 5_000
MAX_FILE_CHARS = 1_000_000


class PlanFilesRequest(Body):
    commit: str = Field(min_length=1, max_length=200, description="the commit the files are from")
    path: str = Field(default="", max_length=500, description="subdirectory holding the configs")
    files: dict[str, str] = Field(
        max_length=MAX_FILES, description="repo-relative path → file text (UTF-8)"
    )
    tree: str | None = Field(
        default=None,
        pattern=r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$",
        description="the commit's git tree: approvals of a policy exception for it count",
    )


def deployed_rules(request: Request) -> RulesAt:
    """The repo policy at a revision, read from the server's config repo (the composition
    root leaves it on `app.state`): approvers count only if the deployed policy names them."""
    found = getattr(request.app.state, "deployed_rules", None)
    return found if callable(found) else no_rules


def build_pr_router() -> APIRouter:
    router = APIRouter(prefix="/api/project/{project_name}", tags=["plan"])

    @router.post("/plan/files")
    async def post_plan_files(
        request: Request,
        body: PlanFilesRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        too_big = [p for p, text in body.files.items() if len(text) > MAX_FILE_CHARS]
        if too_big:
            raise HTTPException(413, f"{too_big[0]} is over {MAX_FILE_CHARS:,} characters")
        files = {path: text.encode() for path, text in body.files.items()}
        store = Store(context.db.engine)
        previewer = getattr(context.controller, "previewer", None)
        try:
            report = await plan_files(
                store,
                access.project_name,
                files,
                commit=body.commit,
                subdir=body.path.strip("/"),
                previewer=previewer if isinstance(previewer, Previewer) else None,
                catalog=context.catalog,
                tree=body.tree,
                deployed=deployed_rules(request),
                job_users=context.settings.job_user_rule(),
            )
        except UsageError as exc:
            raise HTTPException(400, str(exc)) from None
        return report_to_json(report)

    return router


# -- the server's pull-request bot in the GitHub webhook (reconciler.pr.bot) -----------------


def pull_request_bot(request: Request) -> PullRequestBot | None:
    """The bot the app was built with (a GitHub token is configured), else None."""
    bot = getattr(request.app.state, "pull_requests", None)
    return bot if isinstance(bot, PullRequestBot) else None


async def answer_pull_request(
    context: WebContext, bot: PullRequestBot, body: bytes, delivery_id: str, event: str
) -> JSONResponse:
    """Record a `pull_request` delivery once and start planning it (opened/synchronize/
    reopened); 202 at once, the comment and status follow from a background task."""
    if event == "issue_comment":  # `/dockyard approve` (reconciler.pr.approving)
        return await accept_delivery(
            context, "github", event, body, delivery_id, bot.accept_issue_comment
        )
    return await accept_delivery(
        context, "github", event, body, delivery_id, bot.accept_pull_request
    )


async def accept_delivery(
    context: WebContext,
    provider: str,
    event: str,
    body: bytes,
    delivery_id: str,
    accept: Callable[[dict[str, Any]], tuple[bool, str]],
) -> JSONResponse:
    """Record a verified delivery once and hand its payload to a bot (`accept` starts a
    background task, or says why not); 202 at once with what was done. GitHub's
    `pull_request`/`issue_comment` and GitLab's `Note Hook` come through here."""
    try:
        payload = load_object(body)
    except PayloadError as error:
        return _answer(400, "invalid", str(error))
    delivery = NewDelivery(
        provider=provider,
        delivery_id=delivery_id,
        event=event[:64],
        ref=None,
        status_code=202,
        outcome="planning",
        reason=None,
        received_at=datetime.fromtimestamp(context.clock.now_ts(), UTC),
    )
    delivery_pk = await context.db.write(record_delivery, delivery)
    if delivery_pk is None:
        context.metrics.webhook_deliveries.labels(provider, "duplicate").inc()
        return _answer(202, "duplicate", f"delivery {delivery_id} was received before")
    started, why = accept(payload)
    outcome = "planning" if started else "ignored"
    context.metrics.webhook_deliveries.labels(provider, outcome).inc()
    if not started:
        await context.db.write(set_delivery, delivery_pk, outcome=outcome, reason=why)
    return _answer(202, outcome, why)


def after_push(bot: PullRequestBot, hook: HookEvent, answer: JSONResponse) -> None:
    """A push that queued a reconcile: `dockyard/apply` pending on its commit."""
    if hook.event != "push" or answer.status_code != 202:
        return
    try:
        outcome = json.loads(bytes(answer.body)).get("outcome")
    except ValueError:
        return
    if outcome == "queued":
        bot.apply_pending(hook.revision)


def _answer(status: int, outcome: str, reason: str | None) -> JSONResponse:
    body = WebhookAnswer(outcome=outcome, reason=reason)
    return JSONResponse(status_code=status, content=body.model_dump(exclude_none=True))
