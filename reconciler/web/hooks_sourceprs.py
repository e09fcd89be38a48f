"""The webhooks' pull-request part for the stored sources (`reconciler.pr.sourcebots`).

Called by `POST /api/webhooks/github` and `/gitlab` (`reconciler.web.webhooks`) for a
verified `pull_request` / `issue_comment` (GitHub) or `Merge Request Hook` / `Note Hook`
(GitLab) delivery, before the `--repo` bot's part. The delivery is routed by repository as
a push is (`core.sources.route_delivery`, `hookrouting`): it reaches the stored sources of
its repository whose own secret proved it, and each one's bot plans (or checks a
`/dockyard approve`) as that source. A delivery for a source's repository signed with
another source's secret is refused, 401, recorded nowhere, nothing posted. A delivery
routed to no stored source (the `--repo` source, or a server without sources) is left to
the `--repo` bot, as before sources (`None`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from reconciler.api.models import WebhookAnswer
from reconciler.core.sources import delivery_repositories, foreign_repository, route_delivery
from reconciler.pr.bot import PullRequestBot
from reconciler.pr.sourcebots import Provider, SourceBots
from reconciler.web.context import WebContext
from reconciler.web.hookparsing import PayloadError, load_object
from reconciler.web.hookrouting import WebhookKeys
from reconciler.web.routes_pr import accept_delivery

log = logging.getLogger(__name__)

Accept = Callable[[PullRequestBot], Callable[[Mapping[str, Any]], tuple[bool, str]]]
ACCEPTS: dict[tuple[str, str], Accept] = {
    ("github", "pull_request"): lambda bot: bot.accept_pull_request,
    ("github", "issue_comment"): lambda bot: bot.accept_issue_comment,
    ("gitlab", "Merge Request Hook"): lambda bot: bot.accept_merge_request,
    ("gitlab", "Note Hook"): lambda bot: bot.accept_note,
}


def source_bots(request: Request) -> SourceBots | None:
    found = getattr(request.app.state, "source_bots", None)
    return found if isinstance(found, SourceBots) else None


async def answer_source_pr(
    request: Request,
    context: WebContext,
    provider: Provider,
    event: str,
    body: bytes,
    delivery_id: str,
) -> JSONResponse | None:
    """The answer to a stored source's PR delivery, or None when it is for none."""
    bots = source_bots(request)
    accept = ACCEPTS.get((provider, event))
    keys: WebhookKeys = request.state.hook_keys
    proved: set[str] = request.state.hook_proved
    if bots is None or accept is None or not keys.sources:
        return None
    try:
        payload = load_object(body)
    except PayloadError:
        return None  # the caller answers the invalid body
    names = {name for name, value in keys.by_source.items() if value in proved}
    server_proved = keys.server is not None and keys.server in proved
    repositories = delivery_repositories(provider, payload)
    routed, why = route_delivery(keys.sources, names, server_proved, repositories)
    if why is not None and why.startswith("refused"):
        context.metrics.webhook_deliveries.labels(provider, "rejected").inc()
        log.warning("rejected %s webhook delivery: %s", provider, why)
        answer = WebhookAnswer(outcome="rejected", reason=why)
        return JSONResponse(status_code=401, content=answer.model_dump(exclude_none=True))
    sources = [s for s in routed if s.origin != "flags"]
    if not sources:
        return None
    found = [(s, bots.bot(s, provider)) for s in sources]

    def accept_each(payload: Mapping[str, Any]) -> tuple[bool, str]:
        started, reasons = False, []
        for source, bot in found:
            if bot is None:
                reasons.append(f"source {source.name} has no API token to post with")
                continue
            foreign = foreign_repository(provider, dict(payload), source)
            if foreign is not None:
                log.warning("pull-request delivery refused for source %s: %s", source.name, foreign)
                reasons.append(foreign)
                continue
            done, why = accept(bot)(payload)
            started = started or done
            reasons.append(f"source {source.name}: {why}")
        return started, "; ".join(reasons)

    return await accept_delivery(context, provider, event, body, delivery_id, accept_each)
