"""The GitLab webhook's merge-request notes: `/dockyard approve` (`reconciler.pr.approving`).

Used by `POST /api/webhooks/gitlab` (`webhooks.receive_gitlab`) for a verified `Note Hook`
delivery when the server has a GitLab token (`DOCKYARD_GITLAB_TOKEN`, the bot of
`reconciler.pr.bot.build_gitlab_bot`): the delivery is recorded once per id, the bot reads
the note back from GitLab's API in a background task, and the answer is 202 at once.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fastapi import Request
from fastapi.responses import JSONResponse

from reconciler.adapters.db.models import Delivery
from reconciler.api.models import WebhookAnswer
from reconciler.pr.bot import PullRequestBot
from reconciler.web.context import WebContext
from reconciler.web.queries_project import record_delivery, set_delivery

NOTE_EVENT = "Note Hook"


def gitlab_bot(request: Request) -> PullRequestBot | None:
    """The GitLab bot the app was built with (a GitLab token is configured), else None."""
    bot = getattr(request.app.state, "gitlab_pull_requests", None)
    return bot if isinstance(bot, PullRequestBot) else None


async def answer_note(
    context: WebContext, bot: PullRequestBot, body: bytes, delivery_id: str
) -> JSONResponse:
    """Record a `Note Hook` delivery once and start checking it; 202 with what was done."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        payload = None
    if not isinstance(payload, dict):
        return _answer(400, "invalid", "the body is not a JSON object")
    row = Delivery(
        provider="gitlab",
        delivery_id=delivery_id,
        event=NOTE_EVENT,
        ref=None,
        status_code=202,
        outcome="planning",
        reason=None,
        received_at=datetime.fromtimestamp(context.clock.now_ts(), UTC),
    )
    if not await context.db.write(record_delivery, row):
        context.metrics.webhook_deliveries.labels("gitlab", "duplicate").inc()
        return _answer(202, "duplicate", f"delivery {delivery_id} was received before")
    started, why = bot.accept_note(payload)
    outcome = "planning" if started else "ignored"
    context.metrics.webhook_deliveries.labels("gitlab", outcome).inc()
    if not started:
        await context.db.write(set_delivery, row.id, outcome=outcome, reason=why)
    return _answer(202, outcome, why)


def _answer(status: int, outcome: str, reason: str | None) -> JSONResponse:
    body = WebhookAnswer(outcome=outcome, reason=reason)
    return JSONResponse(status_code=status, content=body.model_dump(exclude_none=True))
