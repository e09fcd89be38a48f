"""`ProxyFirst`, what `dockyard server` serves: service paths reach the proxy directly,
everything else the API app; a failing proxy answers 500 without its exception text."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from reconciler.web.app import ProxyFirst


def _api() -> FastAPI:
    app = FastAPI()

    @app.get("/{path:path}")
    async def api(path: str) -> dict[str, str]:
        return {"from": "api", "path": path}

    return app


async def _proxy(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["path"].endswith("/boom/"):
        raise RuntimeError("secret-in-exception")
    body = f"proxy {scope['path']}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


async def test_service_paths_go_to_the_proxy_and_the_rest_to_the_api() -> None:
    app = ProxyFirst(_api(), _proxy)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
        proxied = await client.get("/proxy/services/main/web/v1/models")
        assert proxied.text == "proxy /proxy/services/main/web/v1/models"
        api = await client.get("/api/runs/list")
        assert api.json() == {"from": "api", "path": "api/runs/list"}
        bare = await client.get("/proxy/services")
        assert bare.json()["from"] == "api", "not a service path: the API app answers"
        failed = await client.get("/proxy/services/main/boom/")
        assert failed.status_code == 500
        assert "secret-in-exception" not in failed.text
