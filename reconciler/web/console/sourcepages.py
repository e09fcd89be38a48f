"""The console's sources page: every source the viewer may see, its state and its
project's newest finished reconcile, linking to that project's reconciles. The rows are
the API's own read (`reconciler.web.sourcereads.visible_sources`, what `dockyard source
list` shows). Added by `pages.build_console_router`.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from reconciler.web.console.state import Console
from reconciler.web.context import WebContext, get_context
from reconciler.web.sourcereads import visible_sources


def add_source_pages(router: APIRouter, console: Console) -> None:
    @router.get("/console/sources")
    async def sources(request: Request, context: WebContext = Depends(get_context)) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            found = await visible_sources(request, context, viewer.principal)
            return console.page("sources.html", viewer, sources=found)

        return await console.guard(request, body)
