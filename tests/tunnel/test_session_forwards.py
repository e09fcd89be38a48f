"""The server's loopback listeners to hosts' agent SSH servers (`engine.sessionforwards`),
over a real SSH connection of the pool: a connection to the listener is a channel to the
remote port (here the agent's HTTP port behind the agent's embedded SSH server); one
listener per (host, port); `close` stops them."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from agent.protocol import API_PREFIX
from agent.tunnel import TunnelPool
from reconciler.engine.sessionforwards import SessionForwards
from tests.tunnel.conftest import AgentOverSSH


async def _get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    return answer


async def test_a_listener_reaches_the_remote_port_and_closes(agent_over_ssh: AgentOverSSH) -> None:
    pool = TunnelPool()
    forwards = SessionForwards(pool)
    target = agent_over_ssh.target()
    try:
        port = await forwards.port(target, agent_over_ssh.http_port)
        assert await forwards.port(target, agent_over_ssh.http_port) == port
        answers = await asyncio.gather(*(_get(port, f"{API_PREFIX}/healthcheck") for _ in range(3)))
        assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers
    finally:
        await forwards.close()
        await pool.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_a_local_listener_on_the_attach_host_reaches_a_loopback_port() -> None:
    """`local`: a listener on the forwards' host (here 127.0.0.2, as an `--attach-host`)
    whose connections reach a port on 127.0.0.1 of this machine; nothing on 127.0.0.1."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"echo:" + await reader.readline())
        await writer.drain()
        writer.close()

    behind = await asyncio.start_server(echo, "127.0.0.1", 0)
    behind_port = int(behind.sockets[0].getsockname()[1])
    pool = TunnelPool()
    forwards = SessionForwards(pool, "127.0.0.2")
    try:
        port = await forwards.local(behind_port)
        assert await forwards.local(behind_port) == port
        reader, writer = await asyncio.open_connection("127.0.0.2", port)
        writer.write(b"hi\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 30) == b"echo:hi\n"
        writer.close()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
    finally:
        await forwards.close()
        await pool.close()
        behind.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.2", port)


def _free_run_of_ports(host: str, count: int) -> int:
    """The first of `count` consecutive ports free on `host` now."""
    for base in range(41000, 60000, 97):
        try:
            with contextlib.ExitStack() as held:
                for port in range(base, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind((host, port))
            return base
        except OSError:
            continue
    raise OSError("no run of free ports")


async def test_with_attach_ports_listeners_take_the_first_free_ports_of_the_range() -> None:
    """`--attach-ports`: each listener takes the first free port of the range (one taken by
    someone else is skipped); a full range is an OSError, and the listeners keep theirs."""
    base = _free_run_of_ports("127.0.0.2", 3)
    squatter = await asyncio.start_server(lambda r, w: None, "127.0.0.2", base)
    pool = TunnelPool()
    forwards = SessionForwards(pool, "127.0.0.2", range(base, base + 3))
    try:
        first, second = await forwards.local(1), await forwards.local(2)
        assert {first, second} == {base + 1, base + 2}
        assert await forwards.local(1) == first
        with pytest.raises(OSError, match="no free port in the attach ports"):
            await forwards.local(3)
    finally:
        await forwards.close()
        await pool.close()
        squatter.close()
