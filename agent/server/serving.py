"""Composition root of the agent: build the parts, serve HTTP on 127.0.0.1, run services.

``start_agent(config, services)`` is an async context manager that takes the data-dir
lock, builds executors, store and ``JobManager`` (re-adopting jobs), binds the HTTP
socket (port 0 picks a free one), starts uvicorn, then enters each extra service, and
writes ``<data-dir>/agent.json`` (pid, port, version) once all is up. ``serve`` runs it
until SIGINT/SIGTERM. Jobs outlive the agent: leaving only stops supervising them.

Extension point: an ``AgentService`` is a callable taking the ``AgentContext`` and
returning an async context manager; the embedded SSH server is one (``--ssh-port``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from agent.diskspace import DEFAULT_MIN_FREE, DiskWatch, docker_root
from agent.httpheads import DEFAULT_MAX_HEADER_BYTES, bounded_heads
from agent.protocol import ExecutorKind, HostInfo, agent_version
from agent.server.app import create_app
from agent.server.archives import DEFAULT_ARCHIVE_LIMITS, ArchiveLimits
from agent.server.executors.base import Executor
from agent.server.executors.docker import DockerExecutor
from agent.server.executors.process import ProcessExecutor
from agent.server.hostfacts import ToolRunner, detect_host, run_tool, sample_gpus, to_capacity
from agent.server.isolation import DEFAULT_IMAGE, Isolation, JobIsolation
from agent.server.jobaccount import JobAccount, agent_tag
from agent.server.jobs import JobManager
from agent.server.mounts import DEFAULT_VOLUME_ROOTS, DOCKER_SOCKETS
from agent.server.peers import PeerCheck, allowed_uids, gated_protocol
from agent.server.store import JobStore, write_atomically
from agent.server.strays import SWEEP_SECONDS

log = logging.getLogger(__name__)

HTTP_HOST = "127.0.0.1"  # never anything else: the agent is reached through SSH only
DEFAULT_HTTP_PORT = 10998


class AgentLockedError(Exception):
    """Another agent already serves this data dir."""


@dataclass(frozen=True)
class AgentConfig:
    data_dir: Path
    http_port: int = DEFAULT_HTTP_PORT  # 0: any free port (see agent.json)
    docker: bool = True  # offer the docker executor when an engine answers
    docker_url: str | None = None  # None: DOCKER_HOST or the default socket
    tool_runner: ToolRunner = run_tool
    allow_users: tuple[str, ...] = ()  # API callers besides the agent's user and root
    min_free_disk: int = DEFAULT_MIN_FREE  # below it in the data dir or Docker's, no new jobs
    job_account: JobAccount = field(default_factory=JobAccount)  # who process jobs run as
    protected_dirs: tuple[Path, ...] = ()  # besides the data dir: no job mounts these
    volume_dirs: tuple[Path, ...] = ()  # volumes inside these may be mounted all the same
    volume_roots: tuple[Path, ...] = DEFAULT_VOLUME_ROOTS  # other volumes only below these
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES  # a request's line and headers, at most
    job_isolation: Isolation = Isolation.AUTO  # jobs without an image: container or process
    default_image: str = DEFAULT_IMAGE  # ... and the image of their container
    archive_limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS  # a job's archives, extracted
    sweep_seconds: float = SWEEP_SECONDS  # stray job processes are looked for this often


@dataclass
class AgentContext:
    """What extra services get: the config, the job manager and the bound HTTP port."""

    config: AgentConfig
    manager: JobManager
    http_port: int
    executors: Mapping[ExecutorKind, Executor] = field(default_factory=dict)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def request_stop(self) -> None:
        """Ask the agent to leave ``serve`` (jobs keep running)."""
        self.stopping.set()


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: ``serve`` owns SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


AgentService = Callable[[AgentContext], AbstractAsyncContextManager[None]]


def build_executors(config: AgentConfig) -> dict[ExecutorKind, Executor]:
    tag = agent_tag(config.data_dir)
    protected = (config.data_dir, *config.protected_dirs, *DOCKER_SOCKETS)
    process = ProcessExecutor(
        config.job_account,
        agent_tag=tag,
        volume_roots=config.volume_roots,
        protected=protected,
        volume_dirs=config.volume_dirs,
    )
    executors: dict[ExecutorKind, Executor] = {ExecutorKind.PROCESS: process}
    if config.docker:
        # jobs isolated under a job account get no privileged containers unless allowed
        account = config.job_account
        privileged = account.user is None or account.allow_root
        executors[ExecutorKind.DOCKER] = DockerExecutor(
            base_url=config.docker_url,
            allow_privileged=privileged,
            protected=protected,
            volume_dirs=config.volume_dirs,
            volume_roots=config.volume_roots,
            agent_tag=tag,
        )
    return executors


def job_isolation(config: AgentConfig, executors: Mapping[ExecutorKind, Executor]) -> JobIsolation:
    """Where jobs without an image run (``isolation``), asking the Docker executor's engine."""
    docker = executors.get(ExecutorKind.DOCKER)
    probe = docker.engine_facts if isinstance(docker, DockerExecutor) else None
    return JobIsolation(config.job_isolation, config.default_image, probe)


def disk_watch(config: AgentConfig) -> DiskWatch:
    """The agent's data dir and, with a Docker engine, Docker's root dir."""
    paths = {"data dir": config.data_dir}
    root = docker_root() if config.docker else None
    if root is not None:
        paths["docker root"] = root
    return DiskWatch(paths, config.min_free_disk)


@contextlib.asynccontextmanager
async def start_agent(
    config: AgentConfig, services: Sequence[AgentService] = ()
) -> AsyncIterator[AgentContext]:
    config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config.data_dir.chmod(0o700)  # jobs' specs hold secrets; jobs of other users stay out
    with _data_dir_lock(config.data_dir):
        executors = build_executors(config)

        async def probe() -> HostInfo:
            return await detect_host(
                data_dir=config.data_dir, executors=executors.values(), runner=config.tool_runner
            )

        host = await probe()
        manager = JobManager(
            store=JobStore(config.data_dir),
            executors=executors,
            capacity=to_capacity(host),
            gpu_sampler=lambda: sample_gpus(config.tool_runner),
            disk=disk_watch(config),
            isolation=job_isolation(config, executors),
            archive_limits=config.archive_limits,
            sweep_every=config.sweep_seconds,
        )
        await manager.start()
        sock = _bind(config.http_port)
        server = _Server(_uvicorn_config(create_app(manager, probe), config))
        server_task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            context = AgentContext(config, manager, sock.getsockname()[1], executors)
            async with contextlib.AsyncExitStack() as stack:
                for service in services:
                    await stack.enter_async_context(service(context))
                _write_agent_file(config.data_dir, context.http_port)
                yield context
        finally:
            # answer open long-polls now (the services, whose loops follow the feed, have
            # left): uvicorn's shutdown waits for every request in flight
            manager.events.stop()
            server.should_exit = True
            await asyncio.gather(server_task, return_exceptions=True)
            sock.close()
            await manager.close()


async def serve(config: AgentConfig, services: Sequence[AgentService] = ()) -> None:
    """Run the agent until SIGINT or SIGTERM."""
    async with start_agent(config, services) as context:
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, context.request_stop)
        log.info(
            "agent serving on %s:%d, data dir %s", HTTP_HOST, context.http_port, config.data_dir
        )
        await context.stopping.wait()


def _uvicorn_config(app: FastAPI, config: AgentConfig) -> uvicorn.Config:
    """uvicorn for the API: no forwarding headers, each connection's user checked once."""
    check = PeerCheck(allowed_uids(config.allow_users))
    return uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        # the peer is the socket's, never what X-Forwarded-For says (`peers`)
        proxy_headers=False,
        # a request's head is bounded before the peer's answer (`agent.httpheads`)
        http=gated_protocol(
            bounded_heads(AutoHTTPProtocol, config.max_header_bytes, "--max-header-bytes"),
            check,
        ),
        h11_max_incomplete_event_size=config.max_header_bytes,
    )


def _bind(port: int) -> socket.socket:
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and
    # without it each answer waits ~40 ms for a delayed ACK (headers and body are 2 writes)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HTTP_HOST, port))
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


@contextlib.contextmanager
def _data_dir_lock(data_dir: Path) -> Iterator[None]:
    """Hold ``agent.lock`` so that two agents never supervise the same jobs."""
    with open(data_dir / "agent.lock", "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise AgentLockedError(f"another agent serves {data_dir}") from error
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write_agent_file(data_dir: Path, http_port: int) -> None:
    info = {"pid": os.getpid(), "http_port": http_port, "version": agent_version()}
    write_atomically(data_dir / "agent.json", json.dumps(info).encode())
