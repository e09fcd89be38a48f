"""The port-forwarding WebSocket refuses callers without a valid token or project access."""

from __future__ import annotations

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.web.serving import Running


def _ws(server: Running, project: str = "main") -> str:
    base = server.url.replace("http://", "ws://")
    return f"{base}/api/project/{project}/runs/forward?run_name=train&port=8000"


def _refused(server: Running, token: str | None, project: str = "main") -> int | None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with connect(_ws(server, project), additional_headers=headers, open_timeout=10) as ws:
            ws.recv(timeout=10)
    except InvalidStatus as exc:
        return exc.response.status_code
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd else None
    raise AssertionError("the forward socket did not refuse")


def test_forward_needs_token_and_membership(server: Running) -> None:
    assert _refused(server, None) == 403
    assert _refused(server, "bad-token") == 403
    with server.client(server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": "outsider"}).json()
    assert _refused(server, made["token"]) == 403
    assert _refused(server, server.admin_token, project="nope") == 403


def test_forward_without_a_runtime_tunnel_closes_1011(server: Running) -> None:
    # the fake runtime has no SSH tunnel pool: the socket is closed with a reason, no crash
    assert _refused(server, server.admin_token) == 1011


async def test_port_forwarder_reports_why_a_connection_was_refused(server: Running) -> None:
    import asyncio

    from reconciler.api.forwarding import ForwardTarget, PortForwarder

    target = ForwardTarget(server.url, server.admin_token, "main", "train")
    forwarder = PortForwarder(target, [(0, 8000)], any_port=True)
    errors: list[str] = []
    forwarder.on_error = errors.append
    await forwarder.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", forwarder.bound[8000])
        assert await asyncio.wait_for(reader.read(), timeout=10) == b""  # closed, nothing sent
        writer.close()
    finally:
        await forwarder.close()
    assert errors == ["port 8000: port forwarding is not available here"]
