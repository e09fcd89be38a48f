"""Attack on dstack's attach path through the agent's SSH server (agent/ssh/jump.py).

dstack hops through the agent's SSH server with the job's id as the outer user name, then
connects to the same server again through that hop; the inner connection is tied to the job
the outer user name named. The attacker is a member of project `alpha` only (a user key
limited to it, as the server writes it), on a real agent (process jobs, its embedded SSH
server) running a job of `alpha` and jobs of `bravo`. The attacker names `bravo`'s running
job, its finished job, its run name and an unknown id as the outer user; hops through a job
of their own to `bravo`'s port, the agent's API and back to the SSH server as `bravo`'s job;
and asks the inner connection for a session as `bravo`'s job. Every one must be refused,
with asyncssh and with OpenSSH configured as dstack configures it; the same steps with the
attacker's own job work (so the refusals are not vacuous).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from agent.client import AgentClient
from agent.protocol import JobSpec, JobStatus, PortRequest
from agent.ssh.joblogs import KeptLogs
from agent.ssh.jump import JobAccess, JobLink
from agent.ssh.runner_api import LogPiece, start_time
from agent.ssh.server import KeyFile, SSHServerOptions, start_ssh_server, user_key_line
from agent.tunnel import TunnelPool
from tests.services.missing import needs_ssh_client
from tests.tunnel.conftest import (  # noqa: F401 - fixtures
    AgentOverSSH,
    agent_over_ssh,
    free_port,
    keys,
    unique_id,
    wait_job,
)

PROJECT = "dockyard.project"


@dataclass(frozen=True)
class Field:
    agent: AgentOverSSH
    attacker_key: Path
    alpha: str  # a running job of the attacker's project
    alpha_port: int
    bravo: str  # a running job of another project
    bravo_port: int
    bravo_done: str  # a finished job of that project
    bravo_run: str


def _spec(project: str, run: str, commands: list[str], port: int | None = None) -> JobSpec:
    return JobSpec(
        id=unique_id(run),
        run_name=run,
        labels={PROJECT: project},
        ports=[PortRequest(container_port=port)] if port else [],
        commands=commands,
    )


async def _listening(port: int) -> None:
    async with asyncio.timeout(30):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return


def _server(word: str, port: int) -> list[str]:
    return [f"echo {word}", f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1"]


@pytest.fixture
async def field(agent_over_ssh: AgentOverSSH, tmp_path: Path) -> AsyncIterator[Field]:  # noqa: F811
    pool = TunnelPool()
    client = AgentClient.over_tunnel(pool, agent_over_ssh.target(), agent_over_ssh.http_port)
    alpha_port, bravo_port = free_port(), free_port()
    alpha = _spec("alpha", "alpha-web", _server("alpha-secret", alpha_port), alpha_port)
    bravo = _spec("bravo", "bravo-web", _server("bravo-secret", bravo_port), bravo_port)
    done = _spec("bravo", "bravo-once", ["echo bravo-finished-secret"])
    for spec in (alpha, bravo, done):
        await client.submit(spec)
    await wait_job(client, done.id, lambda s: s.status.is_finished())
    for spec in (alpha, bravo):
        await wait_job(client, spec.id, lambda s: s.status == JobStatus.RUNNING)
    for port in (alpha_port, bravo_port):  # both listen: a refusal is not a closed port
        await _listening(port)
    key = asyncssh.generate_private_key("ssh-ed25519")
    attacker = tmp_path / "attacker"
    key.write_private_key(str(attacker))
    attacker.chmod(0o600)
    authorized = agent_over_ssh.keys.authorized_keys
    line = user_key_line(key.export_public_key().decode(), ["alpha"])
    authorized.write_text(authorized.read_text() + line + "\n")
    try:
        yield Field(
            agent_over_ssh,
            attacker,
            alpha.id,
            alpha_port,
            bravo.id,
            bravo_port,
            done.id,
            "bravo-web",
        )
    finally:
        for spec in (alpha, bravo):
            await client.stop(spec.id, force=True)
        await client.aclose()
        await pool.close()


def connect(
    field: Field,
    user: str,
    tunnel: asyncssh.SSHClientConnection | None = None,
    *,
    key: Path | None = None,
) -> asyncssh.connection._ConnectionContext:  # type: ignore[name-defined]
    """A connection to the agent's SSH server as `user` with `key` (the attacker's by
    default), through `tunnel` (an outer connection: dstack's hop) if given."""
    return asyncssh.connect(
        "localhost" if tunnel else "127.0.0.1",
        field.agent.ssh_port,
        tunnel=tunnel,
        username=user,
        client_keys=[str(key or field.attacker_key)],
        known_hosts=None,
        config=None,
    )


async def _refused(conn: asyncssh.SSHClientConnection, host: str, port: int) -> str:
    with pytest.raises(asyncssh.ChannelOpenError) as info:
        _, writer = await conn.open_connection(host, port)
        writer.close()
    return info.value.reason


async def _session(conn: asyncssh.SSHClientConnection) -> asyncssh.SSHCompletedProcess:
    async with asyncio.timeout(30):
        return await conn.run("pwd; echo $DOCKYARD_RUN_NAME")


async def _log(conn: asyncssh.SSHClientConnection, until: bytes, query: str = "") -> bytes:
    """dstack-runner's log stream through a forward of port 10999, read until `until` (or
    until the agent closes it)."""
    listener = await conn.forward_local_port("127.0.0.1", 0, "localhost", 10999)
    got = b""
    try:
        async with (
            asyncio.timeout(30),
            ws_connect(f"ws://127.0.0.1:{listener.get_port()}/logs_ws{query}") as socket,
        ):
            while until not in got:
                message = await socket.recv()
                got += message if isinstance(message, bytes) else message.encode()
    except ConnectionClosed:
        pass
    finally:
        listener.close()
    return got


async def test_outer_user_naming_another_projects_job_gets_no_hop(field: Field) -> None:
    ssh_port = field.agent.ssh_port
    for name in (field.bravo, field.bravo_done, field.bravo_run, unique_id("nosuchjob")):
        async with connect(field, name) as outer:
            for host in ("localhost", "127.0.0.1", "::1"):
                reason = await _refused(outer, host, ssh_port)
                assert "no job named" in reason, (name, host, reason)
            for port in (field.bravo_port, field.agent.http_port, 10999):
                assert "not allowed" in await _refused(outer, "127.0.0.1", port), (name, port)
            result = await _session(outer)
            assert result.exit_status != 0 and "no job named" in str(result.stderr), name
            assert "bravo" not in str(result.stdout)


async def test_a_hop_through_the_attackers_own_job_reaches_only_that_job(field: Field) -> None:
    ssh_port = field.agent.ssh_port
    async with connect(field, field.alpha) as outer:
        # the inner user name is the attacker's choice: the link, not the name, decides
        for inner_user in ("root", field.bravo, field.bravo_run):
            async with connect(field, inner_user, tunnel=outer) as inner:
                result = await _session(inner)
                assert result.exit_status == 0, result.stderr
                assert field.alpha in str(result.stdout) and "alpha-web" in str(result.stdout)
                for port in (field.bravo_port, field.agent.http_port):
                    assert "not allowed" in await _refused(inner, "127.0.0.1", port)
                for name in ("localhost", "127.0.0.1"):  # a hop from the hop, as bravo's job
                    assert "no job named" in await _refused(inner, name, ssh_port)
                log = await _log(inner, b"alpha-secret")
                assert b"alpha-secret" in log and b"bravo" not in log
        # a running job has no end yet: a start_time after its lines still streams them
        async with connect(field, "root", tunnel=outer) as inner:
            log = await _log(inner, b"alpha-secret", "?start_time=2100-01-01T00:00:00Z")
            assert b"alpha-secret" in log
        # the attacker's own job's port stays reachable (the refusals above are not vacuous)
        _, writer = await outer.open_connection("127.0.0.1", field.alpha_port)
        writer.close()


async def test_a_finished_job_of_the_attackers_project_gives_its_log_not_a_shell(
    field: Field,
) -> None:
    pool = TunnelPool()
    client = AgentClient.over_tunnel(pool, field.agent.target(), field.agent.http_port)
    done = _spec("alpha", "alpha-once", ["echo alpha-finished"])
    await client.submit(done)
    await wait_job(client, done.id, lambda s: s.status.is_finished())
    await client.aclose()
    await pool.close()
    async with connect(field, done.id) as outer, connect(field, "root", outer) as inner:
        result = await _session(inner)
        assert result.exit_status != 0 and "no job named" in str(result.stderr)
        assert b"alpha-finished" in await _log(inner, b"alpha-finished")
        # dstack's start_time: the job ended before it -> nothing; after it -> everything
        later, earlier = "2100-01-01T00:00:00%2B00:00", "2000-01-01T00:00:00%2B00:00"
        assert await _log(inner, b"alpha-finished", f"?start_time={later}") == b""
        got = await _log(inner, b"alpha-finished", f"?start_time={earlier}")
        assert b"alpha-finished" in got


def _openssh(field: Field, home: Path, job_id: str) -> subprocess.CompletedProcess[str]:
    """`ssh <run> echo hi` with the two aliases dstack's attach writes."""
    config = home / f"config-{job_id}"
    common = (
        f"  IdentityFile {field.attacker_key}\n  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n"
    )
    config.write_text(
        f"Host run-host\n  HostName 127.0.0.1\n  Port {field.agent.ssh_port}\n"
        f"  User {job_id}\n{common}"
        f"Host run\n  HostName localhost\n  Port {field.agent.ssh_port}\n  User root\n"
        f"  ProxyJump run-host\n{common}"
    )
    return subprocess.run(
        ["ssh", "-F", str(config), "run", "echo", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@needs_ssh_client()
async def test_openssh_as_dstack_configures_it(field: Field, tmp_path: Path) -> None:
    for job_id in (field.bravo, field.bravo_done, unique_id("nosuchjob")):
        refused = await asyncio.to_thread(_openssh, field, tmp_path, job_id)
        assert refused.returncode != 0 and "hi" not in refused.stdout, refused
        assert "prohibited" in refused.stderr.lower(), refused.stderr
    allowed = await asyncio.to_thread(_openssh, field, tmp_path, field.alpha)
    assert allowed.returncode == 0 and allowed.stdout.strip() == "hi", allowed


async def _refused_or_closed(conn: asyncssh.SSHClientConnection, host: str, port: int) -> str:
    """A new channel on `conn` is refused ("no longer authorized"), or the agent has closed
    the whole connection meanwhile (`agent.ssh.keywatch`, within a second of the change)."""
    try:
        reason = await _refused(conn, host, port)
    except (asyncssh.Error, OSError, ValueError):  # the connection was closed meanwhile
        return "closed"
    return "closed" if "connection closed" in reason.lower() else reason


def _replace(path: Path, text: str) -> None:
    """Write the key file whole at once, as the server does (`mv`)."""
    temporary = path.with_name(f".{path.name}.new")
    temporary.write_text(text)
    os.replace(temporary, path)


async def test_a_removed_key_opens_nothing_new_on_its_open_connection(field: Field) -> None:
    """A member removed while connected (an open `dstack attach`) gets no new session,
    forward or hop on that connection (refused at once, before the agent closes the
    connection: tests/security/test_revoked_connections.py); a key whose projects changed
    gets no new channel either, until it connects again."""
    authorized = field.agent.keys.authorized_keys
    with_key = authorized.read_text()
    blob = with_key.splitlines()[-1].split()[-1]
    without_key = "".join(f"{x}\n" for x in with_key.splitlines() if blob not in x)
    async with connect(field, field.alpha) as outer:
        assert (await _session(outer)).exit_status == 0
        _replace(authorized, without_key)
        for host, port in (("127.0.0.1", field.alpha_port), ("localhost", field.agent.ssh_port)):
            reason = await _refused_or_closed(outer, host, port)
            assert "no longer authorized" in reason or reason == "closed", reason
    _replace(authorized, with_key)  # back as it was: a new connection works
    async with connect(field, field.alpha) as again:
        assert (await _session(again)).exit_status == 0
        changed = with_key.replace("DOCKYARD_PROJECTS=alpha", "DOCKYARD_PROJECTS=alpha,bravo")
        _replace(authorized, changed)  # other options than it logged in with (it grew:
        # the connection stays open, its new channels are refused)
        assert "no longer authorized" in await _refused(again, "127.0.0.1", field.alpha_port)
    async with connect(field, field.alpha) as fresh:  # a new connection gets the new options
        assert (await _session(fresh)).exit_status == 0


def test_the_key_file_is_parsed_again_only_when_its_bytes_change(tmp_path: Path) -> None:
    path = tmp_path / "authorized_keys"
    first, second = (
        asyncssh.generate_private_key("ssh-ed25519").convert_to_public() for _ in range(2)
    )
    path.write_text(user_key_line(first.export_public_key().decode(), ["alpha"]) + "\n")
    key_file = KeyFile(path)
    parsed = key_file.current()
    assert key_file.current() is parsed  # same bytes: the same parse
    assert parsed.validate(first, "127.0.0.1", "127.0.0.1") is not None
    path.write_text(user_key_line(second.export_public_key().decode(), ["alpha"]) + "\n")
    changed = key_file.current()
    assert changed.validate(first, "127.0.0.1", "127.0.0.1") is None
    assert changed.validate(second, "127.0.0.1", "127.0.0.1") is not None
    path.unlink()  # unreadable: nobody is let in
    assert key_file.current().validate(second, "127.0.0.1", "127.0.0.1") is None


async def test_a_run_name_shared_with_another_project_finds_the_keys_own_job(
    field: Field,
) -> None:
    """`bravo` starts a newer run of the same name as the attacker's: the attacker's hop by
    that run name still reaches their own job (another project's job is never looked at)."""
    pool = TunnelPool()
    client = AgentClient.over_tunnel(pool, field.agent.target(), field.agent.http_port)
    twin = _spec("bravo", "alpha-web", ["echo bravo-twin-secret", "exec sleep 600"])
    await client.submit(twin)
    try:
        await wait_job(client, twin.id, lambda s: s.status == JobStatus.RUNNING)
        async with connect(field, "alpha-web") as outer, connect(field, "root", outer) as inner:
            result = await _session(inner)
            assert result.exit_status == 0, result.stderr
            assert field.alpha in str(result.stdout) and twin.id not in str(result.stdout)
            log = await _log(inner, b"alpha-secret")
            assert b"alpha-secret" in log and b"bravo" not in log
    finally:
        await client.stop(twin.id, force=True)
        await client.aclose()
        await pool.close()


def test_kept_logs_are_found_within_the_keys_projects(tmp_path: Path) -> None:
    kept = KeptLogs(clock=lambda: 0.0)
    for job_id, project in (("job-a", "alpha"), ("job-b", "bravo")):
        log = tmp_path / f"{job_id}.log"
        log.write_bytes(b"x")
        kept.keep(JobLink(job_id, project), "same-run", log)
    alpha = frozenset({"alpha"})
    assert kept.find("same-run", alpha) == JobLink("job-a", "alpha")
    assert kept.find("job-b", alpha) is None and kept.find("job-a", alpha) is not None
    assert kept.find("job-b", None) == JobLink("job-b", "bravo")
    kept.close()


def test_start_time_and_the_end_time_of_kept_logs(tmp_path: Path) -> None:
    assert start_time("/logs_ws?start_time=2026-01-01T00%3A00%3A00%2B00%3A00") == 1767225600.0
    assert start_time("/logs_ws?start_time=2026-01-01T00:00:00") == 1767225600.0  # UTC
    assert start_time("/logs_ws") is None and start_time("/logs_ws?start_time=soon") is None
    kept = KeptLogs(clock=lambda: 0.0)
    log = tmp_path / "out.log"
    log.write_bytes(b"x")
    kept.keep(JobLink("job-1", "alpha"), "run", log)  # attached while it ran
    assert kept.ended_at("job-1") is None
    kept.keep(JobLink("job-1", "alpha"), "run", log, ended_at=42.0)  # then it ended
    kept.keep(JobLink("job-1", "alpha"), "run", log)  # attached again: the end stays
    assert kept.ended_at("job-1") == 42.0 and kept.ended_at("job-2") is None
    kept.close()


async def test_a_client_closing_the_log_stream_keeps_its_ssh_connection(tmp_path: Path) -> None:
    """The client closes `/logs_ws` while the agent is reading the log: the stream ends
    quietly and the user's SSH connection (its other forwards) stays up."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(tmp_path / "user"))
    authorized = tmp_path / "authorized_keys"
    authorized.write_text(user_key_line(key.export_public_key().decode(), ["alpha"]) + "\n")
    release = threading.Event()

    def read(offset: int) -> LogPiece:
        if offset == 0:
            return LogPiece(b"first\n", 6, False)
        release.wait(30)  # the client closes meanwhile
        return LogPiece(b"", offset, True)

    access = JobAccess(
        lambda name, projects: JobLink("job-1", "alpha"), lambda _: read, lambda _: None
    )

    async def no_sessions(name: str, projects: frozenset[str] | None) -> None:
        return None

    options = SSHServerOptions(free_port(), tmp_path / "host_key", authorized)
    acceptor = await start_ssh_server(
        options, policy=lambda port, by_user: False, sessions=no_sessions, access=access
    )
    login = {"client_keys": [str(tmp_path / "user")], "known_hosts": None, "config": None}
    try:
        async with (
            asyncssh.connect("127.0.0.1", options.port, username="job-1", **login) as outer,
            asyncssh.connect(
                "localhost", options.port, tunnel=outer, username="root", **login
            ) as inner,
        ):
            listener = await inner.forward_local_port("127.0.0.1", 0, "localhost", 10999)
            url = f"ws://127.0.0.1:{listener.get_port()}/logs_ws"
            async with asyncio.timeout(30), ws_connect(url) as socket:
                assert await socket.recv() == b"first\n"
                await socket.close()  # while the agent's second read is in progress
            release.set()  # the agent's read ends after the client's close
            async with asyncio.timeout(30), ws_connect(url) as again:  # still connected
                assert await again.recv() == b"first\n"
            listener.close()
    finally:
        release.set()
        acceptor.close()
