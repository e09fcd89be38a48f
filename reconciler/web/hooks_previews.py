"""The webhooks' part for preview runs of pull requests (`reconciler.pr.previews`).

`POST /api/webhooks/github` and `/gitlab` answer as they always did (verify, record once,
plan or queue); afterwards `after_delivery` hands a verified, first-time delivery (not a
`duplicate`, not refused) to the preview bot when the server has one. The bot decides from
the event whether it concerns a preview (label, push, close, `/dockyard preview`) and asks
the host's API the rest in a background task.
"""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.responses import JSONResponse

from reconciler.pr.previews import PreviewBot

_EVENT_HEADERS = {"github": "x-github-event", "gitlab": "x-gitlab-event"}


def after_delivery(request: Request, provider: str, answer: JSONResponse) -> None:
    """Give the preview bot a delivery the webhook accepted (202, not a duplicate)."""
    bot = getattr(request.app.state, "preview_runs", None)
    body = getattr(request.state, "hook_body", None)
    if not isinstance(bot, PreviewBot) or not isinstance(body, bytes):
        return
    if answer.status_code != 202:
        return
    try:
        outcome = json.loads(bytes(answer.body)).get("outcome")
    except ValueError:
        return
    if outcome in ("duplicate", "rejected"):
        return
    event = request.headers.get(_EVENT_HEADERS[provider], "")
    bot.accept(provider, event, body)
