"""Fixtures for tunnel tests: generated keys, the agent's embedded SSH server in-process,
and a small HTTP app standing behind it on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest
import uvicorn
from fastapi import FastAPI, Response

from agent.bundle import Bundle, build_bundle
from agent.client import AgentClient
from agent.protocol import JobState
from agent.ssh.server import SSHServerOptions, start_ssh_server
from agent.ssh.sessions import JobSession
from agent.tunnel import SSHTarget


def unique_id(prefix: str) -> str:
    """A job id no other test on this machine uses: agents find a job's processes by a
    ``DOCKYARD_JOB_ID`` marker, so two tests stopping the same id would hit each other."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Keys:
    private: Path
    authorized_keys: Path
    host_key: Path


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    key = asyncssh.generate_private_key("ssh-ed25519")
    private = tmp_path / "client_key"
    key.write_private_key(str(private))
    private.chmod(0o600)
    authorized = tmp_path / "authorized_keys"
    key.write_public_key(str(authorized))
    return Keys(private, authorized, tmp_path / "host_key")


def make_app() -> FastAPI:
    app = FastAPI()

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/bytes")
    async def some_bytes(n: int) -> Response:
        return Response(content=b"x" * n, media_type="application/octet-stream")

    return app


@pytest.fixture
async def http_port() -> AsyncIterator[int]:
    port = free_port()
    config = uvicorn.Config(make_app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:  # noqa: ASYNC110 - uvicorn has no started event
            await asyncio.sleep(0.01)
    yield port
    server.should_exit = True
    await task


@dataclass
class EmbeddedSSH:
    port: int
    keys: Keys
    sessions: dict[str, JobSession]

    def target(self, port: int | None = None) -> SSHTarget:
        return SSHTarget(
            "127.0.0.1", port or self.port, user="dockyard", identity_file=str(self.keys.private)
        )


@pytest.fixture
async def embedded_ssh(keys: Keys, http_port: int) -> AsyncIterator[EmbeddedSSH]:
    sessions: dict[str, JobSession] = {}

    async def resolve(name: str, projects: frozenset[str] | None) -> JobSession | None:
        return sessions.get(name)

    port = free_port()
    options = SSHServerOptions(port, keys.host_key, keys.authorized_keys)
    acceptor = await start_ssh_server(
        options, policy=lambda p, by_user: p == http_port, sessions=resolve
    )
    yield EmbeddedSSH(port, keys, sessions)
    acceptor.close()
    await acceptor.wait_closed()


@dataclass
class AgentOverSSH:
    """The real agent (process executor) with its embedded SSH server, in this process."""

    http_port: int
    ssh_port: int
    keys: Keys
    data_dir: Path

    def target(self, port: int | None = None, user: str = "dockyard") -> SSHTarget:
        return SSHTarget(
            "127.0.0.1", port or self.ssh_port, user=user, identity_file=str(self.keys.private)
        )

    def log_file(self, job_id: str) -> Path:
        return self.data_dir / "jobs" / job_id / "output.log"


@pytest.fixture
async def agent_over_ssh(keys: Keys, tmp_path: Path) -> AsyncIterator[AgentOverSSH]:
    from agent.server.serving import AgentConfig, start_agent
    from agent.ssh.service import ssh_server_service

    ssh_port = free_port()
    options = SSHServerOptions(ssh_port, keys.host_key, keys.authorized_keys)
    config = AgentConfig(data_dir=tmp_path / "agent", http_port=0, docker=False)
    async with start_agent(config, [ssh_server_service(options)]) as context:
        yield AgentOverSSH(context.http_port, ssh_port, keys, config.data_dir)


from tests.services.sshd import sshd_hosts  # noqa: E402, F401 - the fixture, for deploy tests


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return build_bundle(tmp_path_factory.mktemp("bundle"))


async def wait_job(
    client: AgentClient, job_id: str, done: Callable[[JobState], bool], within: float = 60
) -> JobState:
    """Poll the job's state until `done` holds (or fail after `within` seconds)."""
    async with asyncio.timeout(within):
        while True:
            state = await client.job(job_id)
            if done(state):
                return state
            await asyncio.sleep(0.05)
