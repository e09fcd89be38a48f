"""The console's stylesheet and script, served from the package (no CDN, no build step).

`/console/static/console.css` and `/console/static/console.js` only: the names are fixed,
so no path from a request reaches the file system. Cached for an hour.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from reconciler.web.console.rendering import SECURITY_HEADERS

FILES = {"console.css": "text/css", "console.js": "text/javascript"}


def add_static_routes(router: APIRouter) -> None:
    folder = resources.files("reconciler.web.console") / "static"

    @router.get("/console/static/{name}")
    async def static(name: str) -> Response:
        media = FILES.get(name)
        if media is None:
            return Response("not found", status_code=404, headers=SECURITY_HEADERS)
        headers = {**SECURITY_HEADERS, "Cache-Control": "max-age=3600"}
        return Response((folder / name).read_bytes(), media_type=media, headers=headers)
