"""The GitLab webhook's merge-request notes: `/dockyard approve` (`reconciler.pr.approving`).

Used by `POST /api/webhooks/gitlab` (`webhooks.receive_gitlab`) for a verified `Note Hook`
delivery when the server has a GitLab token (`DOCKYARD_GITLAB_TOKEN`, the bot of
`reconciler.pr.bot.build_gitlab_bot`): the delivery is recorded once per id, the bot reads
the note back from GitLab's API in a background task, and the answer is 202 at once.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from reconciler.pr.bot import PullRequestBot
from reconciler.web.context import WebContext
from reconciler.web.routes_pr import accept_delivery

NOTE_EVENT = "Note Hook"


def gitlab_bot(request: Request) -> PullRequestBot | None:
    """The GitLab bot the app was built with (a GitLab token is configured), else None."""
    bot = getattr(request.app.state, "gitlab_pull_requests", None)
    return bot if isinstance(bot, PullRequestBot) else None


async def answer_note(
    context: WebContext, bot: PullRequestBot, body: bytes, delivery_id: str
) -> JSONResponse:
    """Record a `Note Hook` delivery once and start checking it; 202 with what was done."""
    return await accept_delivery(context, "gitlab", NOTE_EVENT, body, delivery_id, bot.accept_note)
