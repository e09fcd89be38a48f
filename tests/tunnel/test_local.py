"""The local fleet's agent: started on first use, reused, restarted when it died."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from agent.client import AgentClient
from agent.local import (
    PORT_TAKEN,
    _free_port,
    ensure_client_key,
    ensure_local_agent,
    stop_local_agent,
)
from agent.protocol import agent_build
from agent.tunnel import AgentUnreachable, TunnelPool


def has_exited(pid: int) -> bool:
    """True once `pid` is gone or a zombie (this process is its parent)."""
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "State:\tZ" in status.read_text()


async def until_dead(pid: int) -> None:
    async with asyncio.timeout(10):
        while True:
            if has_exited(pid):
                return
            await asyncio.sleep(0.02)


@pytest.fixture
def server_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    stop_local_agent(tmp_path)


async def test_local_agent_is_started_once_and_reused(server_dir: Path) -> None:
    key = ensure_client_key(server_dir / "keys" / "id_ed25519")
    pool = TunnelPool()
    first = await ensure_local_agent(server_dir, key, pool)
    again = await ensure_local_agent(server_dir, key, pool)
    assert first.started and not again.started
    assert again.pid == first.pid and again.ssh_port == first.ssh_port
    async with AgentClient.over_tunnel(pool, first.target, first.agent_port) as client:
        await client.check_version()
    authorized = (server_dir / "local-agent" / "authorized_keys").read_text().splitlines()
    assert len(authorized) == 1

    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    wrong = server_dir / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{first.ssh_port} {impostor}")
    with pytest.raises(AgentUnreachable, match=r"not trusted|verif|host key"):
        await TunnelPool().connection(dataclasses.replace(first.target, known_hosts=str(wrong)))

    os.kill(first.pid, signal.SIGKILL)
    await until_dead(first.pid)
    revived = await ensure_local_agent(server_dir, key, pool)
    assert revived.started and revived.pid != first.pid
    async with AgentClient.over_tunnel(pool, revived.target, revived.agent_port) as client:
        await client.check_version()
    await pool.close()


async def test_an_unrecorded_orphan_agent_is_replaced(server_dir: Path) -> None:
    """A server killed between starting the agent and recording its pid leaves an agent
    nobody knows; the next start stops it instead of failing on its data-dir lock."""
    key = ensure_client_key(server_dir / "keys" / "id_ed25519")
    pool = TunnelPool()
    orphan = await ensure_local_agent(server_dir, key, pool)
    (server_dir / "local-agent" / "state.json").unlink()
    fresh = await ensure_local_agent(server_dir, key, pool)
    assert fresh.started
    assert fresh.pid != orphan.pid
    await until_dead(orphan.pid)
    async with AgentClient.over_tunnel(pool, fresh.target, fresh.agent_port) as client:
        await client.check_version()
    await pool.close()


async def test_an_agent_of_another_build_is_replaced(
    server_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = ensure_client_key(server_dir / "keys" / "id_ed25519")
    pool = TunnelPool()
    first = await ensure_local_agent(server_dir, key, pool)
    async with AgentClient.over_tunnel(pool, first.target, first.agent_port) as client:
        assert (await client.healthcheck()).build == agent_build(), "it reports its build"
    # The server's code moved (a pull without a version bump): the running agent is old.
    monkeypatch.setattr("agent.local.agent_build", lambda: "another-build")
    replaced = await ensure_local_agent(server_dir, key, pool)
    assert replaced.started and replaced.pid != first.pid
    await until_dead(first.pid)
    await pool.close()


async def test_the_servers_key_is_accepted_from_127_0_0_1_only(server_dir: Path) -> None:
    """The control line is `from="127.0.0.1"` (a plain line of an older server is replaced):
    the server's own connections come from there; the `--attach-host` listener's connections
    to the agent come from 127.0.0.2 (`engine.sessionforwards.LOCAL_SOURCE`), where the
    server's key opens nothing."""
    key = ensure_client_key(server_dir / "keys" / "id_ed25519")
    public = asyncssh.read_private_key(str(key)).export_public_key().decode().strip()
    keys_file = server_dir / "local-agent" / "authorized_keys"
    keys_file.parent.mkdir(parents=True)
    keys_file.write_text(f"{public}\n")  # as older servers wrote it
    pool = TunnelPool()
    agent = await ensure_local_agent(server_dir, key, pool)
    assert keys_file.read_text().splitlines() == [f'from="127.0.0.1" {public}']
    async with AgentClient.over_tunnel(pool, agent.target, agent.agent_port) as client:
        await client.check_version()  # from 127.0.0.1: the server's own path works
    await pool.close()
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(
            "127.0.0.1",
            agent.ssh_port,
            local_addr=("127.0.0.2", 0),
            username="dockyard",
            client_keys=[str(key)],
            known_hosts=None,
            config=None,
        )


async def test_a_port_taken_before_the_agent_binds_it_starts_the_agent_on_others(
    server_dir: Path,
) -> None:
    # The race the picker cannot close: a port free when picked is taken by another
    # process before the agent binds it. Here the other process holds it from the start
    # and the picker answers it anyway, as a picker losing that race would.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    held = taken.getsockname()[1]
    answers: list[int] = []

    def racing_pick(preferred: int | None) -> int:
        port = held if not answers else _free_port(preferred)
        answers.append(port)
        return port

    key = ensure_client_key(server_dir / "keys" / "id_ed25519")
    pool = TunnelPool()
    try:
        agent = await ensure_local_agent(server_dir, key, pool, pick_port=racing_pick)
        assert answers[0] == held and held not in (agent.agent_port, agent.ssh_port)
        async with AgentClient.over_tunnel(pool, agent.target, agent.agent_port) as client:
            await client.check_version()
        first_log = (server_dir / "local-agent" / "agent.log.1").read_text()
        assert PORT_TAKEN in first_log  # the first agent exited saying why
    finally:
        taken.close()
        await pool.close()


async def test_many_callers_at_once_never_hold_the_loops_threads(server_dir: Path) -> None:
    """One caller per project's local fleet ensures the agent at the same time (50 sources
    on one server). Waiting for the start lock must not hold a thread of the loop's
    default executor: with more waiters than threads, the holder could get none to start
    the agent, and every caller (and the web app) stood still."""
    from concurrent.futures import ThreadPoolExecutor

    key = ensure_client_key(server_dir / "keys" / "id_ed25519")
    pool = TunnelPool()
    loop = asyncio.get_running_loop()
    threads = ThreadPoolExecutor(max_workers=2)
    loop.set_default_executor(threads)
    try:
        callers = [ensure_local_agent(server_dir, key, pool) for _ in range(6)]
        agents = await asyncio.wait_for(asyncio.gather(*callers), timeout=60)
    finally:
        threads.shutdown(wait=False, cancel_futures=True)
    assert sum(agent.started for agent in agents) == 1
    assert len({agent.pid for agent in agents}) == 1


async def test_a_request_is_answered_while_many_long_polls_hold_the_agent(
    server_dir: Path,
) -> None:
    """One agent, one client, more long-polls than a connection cap would allow (every
    project's local fleet is the same local agent, each followed by a poll of its own):
    a submission-like request still goes out at once, not after a poll ends."""
    key = ensure_client_key(server_dir / "keys" / "id_ed25519")
    pool = TunnelPool()
    agent = await ensure_local_agent(server_dir, key, pool)
    async with AgentClient.over_tunnel(pool, agent.target, agent.agent_port) as client:
        first = await client.job_events(0, "", wait=0)
        polls = [
            asyncio.create_task(client.job_events(first.seq, first.epoch, wait=50))
            for _ in range(30)
        ]
        try:
            await asyncio.sleep(0)  # the polls are sent before the request below
            answer = await asyncio.wait_for(client.healthcheck(), timeout=20)
            assert answer.build
            assert not any(poll.done() for poll in polls)  # they were all still held
        finally:
            for poll in polls:
                poll.cancel()
            await asyncio.gather(*polls, return_exceptions=True)
