"""`POST /api/webhooks/github` and `/gitlab`: verify, record, queue, answer 202 at once.

Order matters, and nothing of an unproven body is kept or parsed. The size is checked
first (`Content-Length` over `max_webhook_bytes` → 413 without reading). A server with no
webhook secret answers 401 to every delivery. GitLab's token is a header: it is checked
(constant time) before the body is read. A GitHub delivery with no well-formed
`X-Hub-Signature-256` is 401 at once; otherwise its body is hashed as it streams, within
a budget shared by all connections (`hookbodies`: no room → 503 at once, unread; a body
slower than the budget's `read_seconds` → 408, its room given back), and a bad signature
is 401. A refused delivery *records nothing* (so a forged delivery can never
take a real delivery's id and get it deduplicated away). A verified delivery is recorded once per
(provider, delivery id): a replay gets 202 `duplicate` and queues nothing. A push to the
watched branch queues a reconcile through `Controller.request_reconcile`; anything else is
202 with the reason. No payload or secret is ever logged.

Many sources (`hookrouting`, docs/sources.md): the signature or token is checked against
the server's secret and every source's own before anything of the body is read; the
proven delivery then reaches the sources of its repository whose own secret proved it
(one reconcile queued per source: a monorepo's sources each get theirs), a delivery for
a repository signed with another source's secret is refused (401, recorded nowhere), and
one for a repository no source follows is 202 `ignored`, nothing fetched. A pull or
merge request (or a note on one) of a stored source's repository goes to that source's
own PR bot (`hooks_sourceprs`), the `--repo` one's to the `--repo` bot.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from reconciler.adapters.db.readmodels.project import record_delivery, set_delivery
from reconciler.api.models import WebhookAnswer
from reconciler.domain.history import NewDelivery
from reconciler.errors import DockyardError, TransientError
from reconciler.web.context import WebContext, get_context
from reconciler.web.hookbodies import (
    BadSignatureError,
    BodyTooLargeError,
    BusyError,
    SlowBodyError,
    UnverifiedBudget,
    declared_length,
    is_signature_shaped,
    read_github_body_any,
    read_limited,
)
from reconciler.web.hookparsing import (
    Decision,
    HookEvent,
    PayloadError,
    decide,
    is_gitlab_token_valid,
    read_github,
    read_gitlab,
)
from reconciler.web.hookrouting import Target, WebhookKeys, targets_for, webhook_keys
from reconciler.web.hooks_gitlab import NOTE_EVENT, answer_note, gitlab_bot
from reconciler.web.hooks_previews import after_delivery
from reconciler.web.hooks_sourceprs import answer_source_pr
from reconciler.web.routes_pr import after_push, answer_pull_request, pull_request_bot

log = logging.getLogger(__name__)

UNVERIFIED_DELIVERIES = 2
"""Largest GitHub deliveries (`max_webhook_bytes`) whose bodies may be read unverified at
once, all connections together (`hookbodies.UnverifiedBudget`); more → 503 at once."""


def _answer(status: int, outcome: str, reason: str | None = None, **extra: str) -> JSONResponse:
    body = WebhookAnswer(outcome=outcome, reason=reason, **extra)
    return JSONResponse(status_code=status, content=body.model_dump(exclude_none=True))


async def _handle(
    context: WebContext,
    hook: HookEvent,
    delivery_id: str,
    event: str,
    routed: tuple[list[Target], str | None],
) -> JSONResponse:
    targets, why = routed
    if hook.event != "ping" and why is not None and why.startswith("refused"):
        return _rejected(context, hook.provider, why)  # recorded nowhere, like a bad signature
    decisions = [(t, decide(hook, t.branch)) for t in targets]
    queueing = [(t, d) for t, d in decisions if d.queue]
    if hook.event == "ping":
        decision = decide(hook, context.settings.branch)
    elif queueing:
        decision = queueing[0][1]
    elif decisions:
        decision = decisions[0][1]
    else:  # no source follows the delivery's repository: nothing is fetched
        decision = Decision(False, "ignored", (why or "").removeprefix("ignored: ") or None)
    delivery = NewDelivery(
        provider=hook.provider,
        delivery_id=delivery_id,
        event=event[:64],
        ref=hook.ref[:500] if hook.ref else None,
        status_code=202,
        outcome=decision.outcome,
        reason=decision.reason,
        received_at=datetime.fromtimestamp(context.clock.now_ts(), UTC),
    )
    delivery_pk = await context.db.write(record_delivery, delivery)
    if delivery_pk is None:
        context.metrics.webhook_deliveries.labels(hook.provider, "duplicate").inc()
        return _answer(202, "duplicate", f"delivery {delivery_id} was received before")
    context.metrics.webhook_deliveries.labels(hook.provider, decision.outcome).inc()
    if not decision.queue:
        return _answer(202, decision.outcome, decision.reason)
    try:
        ids = [
            await context.controller.request_reconcile(
                target.project, trigger="webhook", delivery_id=delivery_id, revision=hook.revision
            )
            for target, _ in queueing
        ]
        reconcile_id = ids[0]
    except TransientError as exc:
        await context.db.write(set_delivery, delivery_pk, outcome="error", reason=str(exc))
        return _answer(503, "error", "the reconcile could not be queued; retry the delivery")
    except DockyardError as exc:  # e.g. the server watches no repo: retrying will not help
        await context.db.write(set_delivery, delivery_pk, outcome="ignored", reason=str(exc))
        return _answer(202, "ignored", str(exc))
    return _answer(202, "queued", None, reconcile_id=reconcile_id)


def _rejected(context: WebContext, provider: str, why: str) -> JSONResponse:
    context.metrics.webhook_deliveries.labels(provider, "rejected").inc()
    log.warning("rejected %s webhook delivery: %s", provider, why)
    return _answer(401, "rejected", why)


def _too_large(context: WebContext, provider: str) -> JSONResponse:
    context.metrics.webhook_deliveries.labels(provider, "too_large").inc()
    limit = context.settings.max_webhook_bytes
    return _answer(413, "too_large", f"the body is over {limit} bytes")


def _busy(context: WebContext, provider: str) -> JSONResponse:
    context.metrics.webhook_deliveries.labels(provider, "busy").inc()
    answer = _answer(503, "busy", "too many unverified deliveries in flight; redeliver later")
    answer.headers["Retry-After"] = "10"
    return answer


async def _github_body(
    request: Request, context: WebContext, budget: UnverifiedBudget
) -> bytes | JSONResponse:
    """The delivery's body once its signature is proven, or the answer refusing it: too
    large or no secret or no signature at all (nothing read), no room (503, nothing read),
    a bad signature (401, read within the budget; `hookbodies`)."""
    limit = context.settings.max_webhook_bytes
    declared = declared_length(request)
    if declared is not None and declared > limit:
        return _too_large(context, "github")
    keys = await webhook_keys(request, context)  # the server's and each source's
    if not keys.values:
        return _rejected(context, "github", "the server has no webhook secret configured")
    signature = request.headers.get("x-hub-signature-256")
    if signature is None or not is_signature_shaped(signature):
        return _rejected(context, "github", "missing or invalid X-Hub-Signature-256")
    try:
        body, proved = await read_github_body_any(
            request, limit=limit, budget=budget, secrets=keys.values, signature=signature
        )
    except BodyTooLargeError:
        return _too_large(context, "github")
    except BusyError:
        return _busy(context, "github")
    except BadSignatureError:
        return _rejected(context, "github", "missing or invalid X-Hub-Signature-256")
    except SlowBodyError:
        context.metrics.webhook_deliveries.labels("github", "too_slow").inc()
        return _answer(408, "too_slow", "the body did not arrive in time")
    except ClientDisconnect:  # the caller left mid-body; its room is already given back
        return _answer(400, "invalid", "the body ended early")
    request.state.hook_body = body  # preview runs read it after the answer (hooks_previews)
    request.state.hook_keys, request.state.hook_proved = keys, proved  # hookrouting
    return body


async def _gitlab_body(request: Request, context: WebContext) -> bytes | JSONResponse:
    """The body of a delivery whose `X-Gitlab-Token` is proven first (a header: nothing
    of an unproven body is read), or the answer refusing it."""
    limit = context.settings.max_webhook_bytes
    declared = declared_length(request)
    if declared is not None and declared > limit:
        return _too_large(context, "gitlab")
    keys = await webhook_keys(request, context)  # the server's and each source's
    if not keys.values:
        return _rejected(context, "gitlab", "the server has no webhook secret configured")
    token = request.headers.get("x-gitlab-token")
    proved = {key for key in keys.values if is_gitlab_token_valid(key, token)}
    if not proved:
        return _rejected(context, "gitlab", "missing or invalid X-Gitlab-Token")
    request.state.hook_keys, request.state.hook_proved = keys, proved  # hookrouting
    try:
        body = await read_limited(request, limit)
    except BodyTooLargeError:
        return _too_large(context, "gitlab")
    except ClientDisconnect:
        return _answer(400, "invalid", "the body ended early")
    request.state.hook_body = body  # preview runs read it after the answer (hooks_previews)
    return body


async def receive_github(
    request: Request, context: WebContext, budget: UnverifiedBudget
) -> JSONResponse:
    body = await _github_body(request, context, budget)
    if isinstance(body, JSONResponse):
        return body
    event = request.headers.get("x-github-event", "")
    delivery_id = request.headers.get("x-github-delivery", "")[:200]
    if not delivery_id:
        return _answer(400, "invalid", "missing X-GitHub-Delivery")
    try:
        hook = read_github(event, body)
    except PayloadError as exc:
        return _answer(400, "invalid", str(exc))
    # a stored source's pull request: its own bot, token and policy (hooks_sourceprs)
    answered = await answer_source_pr(request, context, "github", event, body, delivery_id)
    if answered is not None:
        return answered
    # pull requests (reconciler.pr.bot, when a GitHub token is configured): plan PRs,
    # and set `dockyard/apply` pending on the pushed commit
    bot = pull_request_bot(request)
    keys: WebhookKeys = request.state.hook_keys
    proved: set[str] = request.state.hook_proved
    by_server = keys.server is not None and keys.server in proved  # the --repo's PR bot
    if bot is not None and by_server and hook.event in ("pull_request", "issue_comment"):
        return await answer_pull_request(context, bot, body, delivery_id, event)
    routed = targets_for(context, keys, proved, "github", body)
    answer = await _handle(context, hook, delivery_id, event, routed)
    if bot is not None:
        after_push(bot, hook, answer)
    return answer


async def receive_gitlab(request: Request, context: WebContext) -> JSONResponse:
    body = await _gitlab_body(request, context)
    if isinstance(body, JSONResponse):
        return body
    event = request.headers.get("x-gitlab-event", "")
    delivery_id = (
        request.headers.get("x-gitlab-event-uuid") or request.headers.get("idempotency-key") or ""
    )[:200]
    if not delivery_id:
        return _answer(400, "invalid", "missing X-Gitlab-Event-UUID")
    try:
        hook = read_gitlab(event, body)
    except PayloadError as exc:
        return _answer(400, "invalid", str(exc))
    # a stored source's merge request or note: its own bot (hooks_sourceprs)
    answered = await answer_source_pr(request, context, "gitlab", event, body, delivery_id)
    if answered is not None:
        return answered
    notes = gitlab_bot(request)  # `/dockyard approve` on merge requests (hooks_gitlab)
    keys: WebhookKeys = request.state.hook_keys
    proved: set[str] = request.state.hook_proved
    by_server = keys.server is not None and keys.server in proved  # the --repo's notes
    if notes is not None and by_server and event == NOTE_EVENT:
        return await answer_note(context, notes, body, delivery_id)
    routed = targets_for(context, keys, proved, "gitlab", body)
    return await _handle(context, hook, delivery_id, event, routed)


def unverified_budget(request: Request, context: WebContext) -> UnverifiedBudget:
    """The app's one budget of unverified GitHub bodies, made with its first delivery
    (kept on `app.state`, where a test may put a smaller one)."""
    found = getattr(request.app.state, "webhook_budget", None)
    if not isinstance(found, UnverifiedBudget):
        found = UnverifiedBudget(UNVERIFIED_DELIVERIES * context.settings.max_webhook_bytes)
        request.app.state.webhook_budget = found
    return found


def build_webhooks_router() -> APIRouter:
    router = APIRouter(prefix="/api/webhooks", tags=["webhooks"])
    responses: dict[int | str, dict[str, object]] = {
        202: {"model": WebhookAnswer},
        401: {"model": WebhookAnswer},
        408: {"model": WebhookAnswer},
        413: {"model": WebhookAnswer},
        503: {"model": WebhookAnswer},
    }

    @router.post("/github", status_code=202, responses=responses)
    async def github(request: Request, context: WebContext = Depends(get_context)) -> JSONResponse:
        answer = await receive_github(request, context, unverified_budget(request, context))
        after_delivery(request, "github", answer)  # preview runs (reconciler.pr.previews)
        return answer

    @router.post("/gitlab", status_code=202, responses=responses)
    async def gitlab(request: Request, context: WebContext = Depends(get_context)) -> JSONResponse:
        answer = await receive_gitlab(request, context)
        after_delivery(request, "gitlab", answer)  # preview runs (reconciler.pr.previews)
        return answer

    return router
