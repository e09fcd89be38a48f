"""`POST /api/webhooks/github` and `/gitlab`: verify, record, queue, answer 202 at once.

Order matters. The size is checked first (`Content-Length`, then the body is counted as it
streams in: over the limit → 413 without reading further). The signature (GitHub HMAC over
the raw bytes) or token (GitLab) is checked next, in constant time: a bad or missing one is
answered 401 and *nothing is recorded* (so a forged delivery can never take a real
delivery's id and get it deduplicated away). A verified delivery is recorded once per
(provider, delivery id): a replay gets 202 `duplicate` and queues nothing. A push to the
watched branch queues a reconcile through `Controller.request_reconcile`; anything else is
202 with the reason. No payload or secret is ever logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from reconciler.api.models import WebhookAnswer
from reconciler.domain.history import NewDelivery
from reconciler.errors import DockyardError, TransientError
from reconciler.web.context import WebContext, get_context
from reconciler.web.hookparsing import (
    HookEvent,
    PayloadError,
    decide,
    is_github_signature_valid,
    is_gitlab_token_valid,
    read_github,
    read_gitlab,
)
from reconciler.web.hooks_gitlab import NOTE_EVENT, answer_note, gitlab_bot
from reconciler.web.hooks_previews import after_delivery
from reconciler.web.queries_project import record_delivery, set_delivery
from reconciler.web.routes_pr import after_push, answer_pull_request, pull_request_bot

log = logging.getLogger(__name__)


class BodyTooLargeError(Exception):
    pass


async def read_limited(request: Request, limit: int) -> bytes:
    """The raw body, refusing more than `limit` bytes whatever Content-Length claims."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(status: int, outcome: str, reason: str | None = None, **extra: str) -> JSONResponse:
    body = WebhookAnswer(outcome=outcome, reason=reason, **extra)
    return JSONResponse(status_code=status, content=body.model_dump(exclude_none=True))


def _secret(context: WebContext) -> str | None:
    secret = context.settings.webhook_secret
    return secret.get_secret_value() if secret is not None else None


async def _handle(
    context: WebContext, hook: HookEvent, delivery_id: str, event: str
) -> JSONResponse:
    decision = decide(hook, context.settings.branch)
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
        reconcile_id = await context.controller.request_reconcile(
            context.settings.project,
            trigger="webhook",
            delivery_id=delivery_id,
            revision=hook.revision,
        )
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


Verify = Callable[[str, bytes], bool]
"""`verify(secret, body)`: whether the delivery proves it knows the webhook secret."""


async def _verified_body(
    request: Request, context: WebContext, provider: str, verify: Verify, proof: str
) -> bytes | JSONResponse:
    """The delivery's body, or the answer refusing it (too large, no secret, bad proof)."""
    try:
        body = await read_limited(request, context.settings.max_webhook_bytes)
    except BodyTooLargeError:
        return _too_large(context, provider)
    secret = _secret(context)
    if secret is None:
        return _rejected(context, provider, "the server has no webhook secret configured")
    if not verify(secret, body):
        return _rejected(context, provider, f"missing or invalid {proof}")
    request.state.hook_body = body  # preview runs read it after the answer (hooks_previews)
    return body


async def receive_github(request: Request, context: WebContext) -> JSONResponse:
    signature = request.headers.get("x-hub-signature-256")
    body = await _verified_body(
        request,
        context,
        "github",
        lambda secret, body: is_github_signature_valid(secret, body, signature),
        "X-Hub-Signature-256",
    )
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
    # pull requests (reconciler.pr.bot, when a GitHub token is configured): plan PRs,
    # and set `dockyard/apply` pending on the pushed commit
    bot = pull_request_bot(request)
    if bot is not None and hook.event in ("pull_request", "issue_comment"):
        return await answer_pull_request(context, bot, body, delivery_id, event)
    answer = await _handle(context, hook, delivery_id, event)
    if bot is not None:
        after_push(bot, hook, answer)
    return answer


async def receive_gitlab(request: Request, context: WebContext) -> JSONResponse:
    token = request.headers.get("x-gitlab-token")
    body = await _verified_body(
        request,
        context,
        "gitlab",
        lambda secret, _: is_gitlab_token_valid(secret, token),
        "X-Gitlab-Token",
    )
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
    notes = gitlab_bot(request)  # `/dockyard approve` on merge requests (hooks_gitlab)
    if notes is not None and event == NOTE_EVENT:
        return await answer_note(context, notes, body, delivery_id)
    return await _handle(context, hook, delivery_id, event)


def build_webhooks_router() -> APIRouter:
    router = APIRouter(prefix="/api/webhooks", tags=["webhooks"])
    responses: dict[int | str, dict[str, object]] = {
        202: {"model": WebhookAnswer},
        401: {"model": WebhookAnswer},
        413: {"model": WebhookAnswer},
    }

    @router.post("/github", status_code=202, responses=responses)
    async def github(request: Request, context: WebContext = Depends(get_context)) -> JSONResponse:
        answer = await receive_github(request, context)
        after_delivery(request, "github", answer)  # preview runs (reconciler.pr.previews)
        return answer

    @router.post("/gitlab", status_code=202, responses=responses)
    async def gitlab(request: Request, context: WebContext = Depends(get_context)) -> JSONResponse:
        answer = await receive_gitlab(request, context)
        after_delivery(request, "gitlab", answer)  # preview runs (reconciler.pr.previews)
        return answer

    return router
