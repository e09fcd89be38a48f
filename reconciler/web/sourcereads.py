"""The one read of the sources a caller may see, each with its state and its project's
newest finished reconcile: what `POST /api/sources/{list,get}` answer
(`reconciler.web.routes_sources`, so `dockyard source list`) and what the console's
sources page shows (`reconciler.web.console.sourcepages`), so the two cannot disagree.

Global admins see every source; anyone else the sources of the projects they are a
member of. A repo URL's credentials (`https://user:token@host/…`) are never shown, nor
in a pass's error.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import Request

from reconciler.adapters.db.readmodels import accounts as q
from reconciler.adapters.db.sources import LastReconcile
from reconciler.core.sources import source_state, source_to_dict, without_credentials
from reconciler.domain.sources import Source
from reconciler.web.auth import Principal
from reconciler.web.context import WebContext
from reconciler.web.hookrouting import sources_store


async def visible_projects(context: WebContext, me: Principal) -> set[str] | None:
    """The projects whose sources the caller sees (None: every project, an admin)."""
    if me.is_admin:
        return None
    return {p.project_name for p in await context.db.read(q.list_projects, me)}


def shown_source(source: Source, last: LastReconcile | None = None) -> dict[str, Any]:
    """The source, its state and its project's newest finished reconcile (id, status,
    error): what `dockyard source list` shows."""
    shown = source_to_dict(source)
    shown["repo"] = without_credentials(source.repo)
    status, error = (last.status, last.error) if last is not None else (None, None)
    shown["state"] = source_state(source, status, error)
    shown["last_reconcile"] = (
        {
            "id": last.id,
            "status": last.status,
            "error": without_credentials(last.error) if last.error is not None else None,
        }
        if last is not None
        else None
    )
    return shown


async def with_state(
    request: Request, context: WebContext, sources: list[Source]
) -> list[dict[str, Any]]:
    store = sources_store(request, context)
    lasts = await anyio.to_thread.run_sync(store.last_reconciles, [s.project for s in sources])
    return [shown_source(s, lasts.get(s.project)) for s in sources]


async def visible_sources(
    request: Request, context: WebContext, me: Principal, project: str | None = None
) -> list[dict[str, Any]]:
    """The sources `me` may see (of `project` only, when given), by name, with state."""
    found = await anyio.to_thread.run_sync(sources_store(request, context).list_sources, project)
    visible = await visible_projects(context, me)
    seen = [s for s in found if visible is None or s.project in visible]
    return await with_state(request, context, seen)
