"""`TokenGate`: the ASGI middleware that refuses every request without a valid token.

It runs before routing, body parsing and validation, so an anonymous caller learns nothing
(not even which bodies are valid: a 401 comes first, whatever is sent). Open paths are the
health check, the webhooks (they verify their own signature), the service proxy (it
checks tokens per service, as `auth: false` services are public) and the reconcile pages
(signed links, `reconciler.web.pages`) and the web console (its own session cookie and
the same project rules). The principal found is
left in `scope["state"]` for the route dependencies, which then check roles.
"""

from __future__ import annotations

import json

from fastapi import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from reconciler.web.auth import authenticate
from reconciler.web.context import WebContext

OPEN_PATHS = ("/healthcheck", "/")  # "/" redirects to the console
# pages check a signature; the console (`reconciler.web.console`) checks its session cookie
OPEN_PREFIXES = ("/api/webhooks/", "/proxy/services/", "/pages/", "/console/")


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class TokenGate:
    def __init__(self, app: ASGIApp, context: WebContext) -> None:
        self.app = app
        self.context = context

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        header = ""
        for key, value in scope.get("headers", []):
            if key == b"authorization":
                header = value.decode("latin-1")
                break
        try:
            principal = await authenticate(self.context, header)
        except HTTPException as exc:
            body = json.dumps({"detail": exc.detail}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": exc.status_code,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)
