"""The tunnel pool and the SSH transport against the agent's embedded SSH server."""

from __future__ import annotations

import asyncio

import asyncssh
import httpx
import pytest

from agent.ssh.transport import SSHTransport
from agent.tunnel import (
    AgentUnreachable,
    BackoffPolicy,
    SSHTarget,
    TunnelPool,
    UnreachableKind,
    connect_ssh,
)
from tests.tunnel.conftest import EmbeddedSSH, Keys, free_port


def http_over(pool: TunnelPool, target: SSHTarget, port: int) -> httpx.AsyncClient:
    async def open_stream(host: str, p: int):  # type: ignore[no-untyped-def]
        return await pool.open_stream(target, host, p)

    return httpx.AsyncClient(
        transport=SSHTransport(open_stream), base_url=f"http://127.0.0.1:{port}"
    )


async def test_requests_share_one_ssh_connection(embedded_ssh: EmbeddedSSH, http_port: int):
    connects = 0

    async def counting(target: SSHTarget, tunnel: asyncssh.SSHClientConnection | None):  # type: ignore[no-untyped-def]
        nonlocal connects
        connects += 1
        return await connect_ssh(target, tunnel)

    pool = TunnelPool(connect=counting)
    target = embedded_ssh.target()
    async with http_over(pool, target, http_port) as http:
        responses = await asyncio.gather(*(http.get("/hello") for _ in range(20)))
        big = await http.get("/bytes", params={"n": 5_000_000})
    assert [r.json() for r in responses] == [{"hello": "world"}] * 20
    assert len(big.content) == 5_000_000
    assert connects == 1
    assert pool.state(target).connected
    await pool.close()


async def test_forwarding_outside_policy_is_refused(embedded_ssh: EmbeddedSSH, http_port: int):
    pool = TunnelPool()
    target = embedded_ssh.target()
    with pytest.raises(AgentUnreachable) as info:
        await pool.open_stream(target, "127.0.0.1", http_port + 1)
    assert info.value.kind is UnreachableKind.channel_refused
    assert "not allowed" in info.value.detail
    with pytest.raises(AgentUnreachable) as info:
        await pool.open_stream(target, "10.0.0.1", http_port)
    assert info.value.kind is UnreachableKind.channel_refused
    await pool.close()


async def test_unknown_key_is_auth_refused(embedded_ssh: EmbeddedSSH, tmp_path):  # type: ignore[no-untyped-def]
    other = asyncssh.generate_private_key("ssh-ed25519")
    other.write_private_key(str(tmp_path / "other"))
    target = SSHTarget("127.0.0.1", embedded_ssh.port, identity_file=str(tmp_path / "other"))
    pool = TunnelPool()
    with pytest.raises(AgentUnreachable) as info:
        await pool.connection(target)
    assert info.value.kind is UnreachableKind.auth_refused
    await pool.close()


async def test_failed_connects_back_off_on_the_clock(keys: Keys):
    now = 100.0
    attempts = 0

    async def refusing(target: SSHTarget, tunnel: object):  # type: ignore[no-untyped-def]
        nonlocal attempts
        attempts += 1
        raise ConnectionRefusedError("connection refused")

    pool = TunnelPool(connect=refusing, backoff=BackoffPolicy(1.0, 2.0, 5.0), clock=lambda: now)
    target = SSHTarget("127.0.0.1", free_port(), identity_file=str(keys.private))
    kinds = []
    for advance in (0.0, 0.5, 0.6, 1.0, 1.0, 1.0, 2.0, 5.0, 5.0):
        now += advance
        with pytest.raises(AgentUnreachable) as info:
            await pool.connection(target)
        kinds.append(info.value.kind)
        assert info.value.unreachable_since == 100.0
    # failures at t=100 (next +1), 101.1 (+2), 104.1 (+4), 110.1 (+5), 115.1 (+5)
    assert attempts == 5
    assert kinds.count(UnreachableKind.backing_off) == 4
    assert pool.state(target).failures == 5


async def test_an_agent_being_started_is_tried_without_back_off_for_a_while(keys: Keys) -> None:
    """`retry_now`: the failures of the agent that died (and of its successor's start-up)
    hold no caller back while the new one starts; after the window, back-off again."""
    now = 100.0
    attempts = 0

    async def refusing(target: SSHTarget, tunnel: object):  # type: ignore[no-untyped-def]
        nonlocal attempts
        attempts += 1
        raise ConnectionRefusedError("connection refused")

    pool = TunnelPool(connect=refusing, backoff=BackoffPolicy(1.0, 2.0, 5.0), clock=lambda: now)
    target = SSHTarget("127.0.0.1", free_port(), identity_file=str(keys.private))

    async def refused() -> UnreachableKind:
        with pytest.raises(AgentUnreachable) as info:
            await pool.connection(target)
        return info.value.kind

    for _ in range(3):  # the old agent's failures: the next attempt is seconds away
        await refused()
        now += 0.1
    assert await refused() is UnreachableKind.backing_off
    pool.retry_now(target, for_seconds=10.0)
    tried = attempts
    for _ in range(20):  # its successor starting: every call tries (local, cheap)
        assert await refused() is UnreachableKind.connect_failed
        now += 0.1
    assert attempts == tried + 20
    now += 10.0  # the window is over: failures back off again
    await refused()
    assert await refused() is UnreachableKind.backing_off


async def test_reconnects_after_the_connection_drops(embedded_ssh: EmbeddedSSH, http_port: int):
    pool = TunnelPool()
    target = embedded_ssh.target()
    async with http_over(pool, target, http_port) as http:
        assert (await http.get("/hello")).status_code == 200
        first = await pool.connection(target)
        first.close()
        await first.wait_closed()
        assert (await http.get("/hello")).status_code == 200
        assert await pool.connection(target) is not first
    assert pool.state(target).unreachable_since is None
    await pool.close()
