"""Requests are bounded before authentication (issue 12, findings 4 and 11).

Against the real server (`reconciler.app.uvicorn_config`, uvicorn on loopback): 8
connections each sending a 60 MB header get `431` after `max_header_bytes` (and the
server's traced memory stays small), and so do 8 such connections to a host agent's
HTTP API, before its peer check answers; a signed webhook whose JSON nests 100 000 levels
deep is answered 400, not 500.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import threading
import tracemalloc
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import uvicorn

from agent.httpheads import DEFAULT_MAX_HEADER_BYTES
from agent.server.serving import AgentConfig, start_agent
from reconciler.app import Server, build_server, uvicorn_config
from reconciler.settings import Settings
from tests.agent.conftest import recorded_tools
from tests.web.fakes import FakeController
from tests.web.serving import wait_until

SECRET = "bounds-secret"
HEADER_BYTES = 60 * 1000 * 1000


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Server, str]]:
    """The server as `dockyard server` serves it; `indirect` "h11": with uvicorn's h11."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    settings = Settings(
        data_dir=tmp_path / "data",
        cli_config=tmp_path / "home" / "config.yml",
        port=port,
        webhook_secret=SECRET,
    )
    built = build_server(settings, controller_factory=lambda s, store: FakeController(store))
    config = uvicorn_config(built)
    config.log_level = "warning"
    if getattr(request, "param", None) == "h11":
        config.http = "h11"
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthcheck", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, what="the server")
        yield built, url
    finally:
        uv.should_exit = True
        thread.join(timeout=15)
        built.store.close()
        sock.close()


def _send_huge_header(port: int) -> tuple[int, bytes]:
    """Send a request whose one header is 60 MB; (bytes the server took, its answer)."""
    chunk = b"x" * 65536
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"GET /api/projects/list HTTP/1.1\r\nHost: x\r\nX-Big: ")
        try:
            while sent < HEADER_BYTES:
                conn.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while part := conn.recv(65536):
                answer += part
        except ConnectionResetError:
            pass
    return sent, answer


def test_eight_connections_with_60_mb_headers_are_refused_early(
    server: tuple[Server, str],
) -> None:
    built, url = server
    port = int(url.rsplit(":", 1)[1])
    tracemalloc.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: _send_huge_header(port), range(8)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    for sent, answer in results:
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"--max-header-bytes" in answer
        assert b"--max-header-bytes" in answer
        assert sent < 16 * 2**20  # the connection was closed long before 60 MB
    # 8 connections x (64 KiB limit + a read): far from 8 x 60 MB
    assert peak < 40 * 2**20
    assert built.settings.max_header_bytes == DEFAULT_MAX_HEADER_BYTES
    assert httpx.get(f"{url}/healthcheck").status_code == 200


def test_ordinary_requests_and_bodies_pass(server: tuple[Server, str]) -> None:
    _, url = server
    body = b"{" + b" " * (2 * 2**20) + b"}"  # a large body is not a large head
    answer = httpx.post(f"{url}/api/projects/list", content=body, headers={"X-A": "b" * 8000})
    assert answer.status_code in (401, 403)


def test_a_100k_deep_signed_webhook_is_answered_400(server: tuple[Server, str]) -> None:
    _, url = server
    body = b"[" * 100_000 + b"]" * 100_000
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    answer = httpx.post(
        f"{url}/api/webhooks/github",
        content=body,
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": signature,
            "Content-Type": "application/json",
        },
    )
    assert answer.status_code == 400
    assert "nests too deeply" in answer.json()["reason"]


async def test_the_agent_refuses_60_mb_headers_from_8_connections(tmp_path: Path) -> None:
    config = AgentConfig(
        data_dir=tmp_path / "agent", http_port=0, docker=False, tool_runner=recorded_tools(False)
    )
    async with start_agent(config) as context:
        port = context.http_port
        results = await asyncio.gather(
            *(asyncio.to_thread(_send_huge_header, port) for _ in range(8))
        )
    for sent, answer in results:
        assert sent < 16 * 2**20
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"--max-header-bytes" in answer


def test_a_100k_deep_json_body_to_the_api_is_400(server: tuple[Server, str]) -> None:
    built, url = server
    token = built.settings.admin_token_path.read_text().strip()
    body = b'{"a": ' * 100_000 + b"1" + b"}" * 100_000
    answer = httpx.post(
        f"{url}/api/project/main/runs/list",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 400  # FastAPI's own "error parsing the body", not a 500


@pytest.mark.parametrize("server", ["h11"], indirect=True)
def test_h11_gets_the_same_limit(server: tuple[Server, str]) -> None:
    """uvicorn's h11 protocol (where httptools is missing) is bounded by the same setting:
    its answer to an oversized head is its own 400, after as few bytes."""
    built, url = server
    assert uvicorn_config(built).h11_max_incomplete_event_size == DEFAULT_MAX_HEADER_BYTES
    sent, answer = _send_huge_header(int(url.rsplit(":", 1)[1]))
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert sent < 16 * 2**20  # closed long before 60 MB
    fits = httpx.get(f"{url}/healthcheck", headers={"X-A": "b" * 32_000})
    assert fits.status_code == 200
