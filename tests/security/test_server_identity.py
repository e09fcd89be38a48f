"""The server believes no forwarding header unless its operator names trusted proxies.

uvicorn's default trusts `X-Forwarded-For` from 127.0.0.1, so any local account could
choose the client address the server (and, through the proxy's own `x-forwarded-for`,
every service) sees. `dockyard server` turns that off; `--forwarded-allow-ips` names the
proxies that may set it (docs/security.md, "Local users of fleet hosts").
"""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.types import Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from reconciler.app import build_server, uvicorn_config
from reconciler.settings import Settings


async def _client_seen(app: object, forwarded: str) -> str:
    """What a request from 127.0.0.1 claiming `X-Forwarded-For: forwarded` is seen as."""
    seen: list[str] = []

    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["client"][0])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    # what uvicorn puts in front of the server's app, now in front of an echo
    wrapped: object = echo
    if isinstance(app, ProxyHeadersMiddleware):
        app.app = echo  # type: ignore[assignment]
        wrapped = app
    transport = httpx.ASGITransport(app=wrapped, client=("127.0.0.1", 40000))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
        await client.get("/", headers={"X-Forwarded-For": forwarded})
    return seen[0]


async def test_x_forwarded_for_is_not_believed_by_default(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", cli_config=tmp_path / "cli.yml")
    server = build_server(settings)
    try:
        config = uvicorn_config(server)
        config.load()
        assert not config.proxy_headers
        assert await _client_seen(config.loaded_app, "10.6.6.6") == "127.0.0.1"
    finally:
        server.store.close()


async def test_named_proxies_may_set_the_client(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        cli_config=tmp_path / "cli.yml",
        forwarded_allow_ips="127.0.0.1",
    )
    server = build_server(settings)
    try:
        config = uvicorn_config(server)
        config.load()
        assert await _client_seen(config.loaded_app, "10.6.6.6") == "10.6.6.6"
    finally:
        server.store.close()
