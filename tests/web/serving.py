"""A real Dockyard server on loopback for the web and CLI tests.

`running_server(tmp_path, ...)` builds the server through the composition root
(`reconciler.app.build_server`: real SQLite, migrations, first-start admin) with a
controller factory, runs uvicorn in a thread on a free port, waits for `/healthcheck` with a
deadline, and stops it on exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from agent.local import local_paths, stop_local_agent
from agent.server.executors import proctable
from reconciler.adapters.db import Store
from reconciler.app import Server, build_server
from reconciler.ports import Controller
from reconciler.settings import Settings

WEBHOOK_SECRET = "test-webhook-secret"


@dataclass
class Running:
    server: Server
    url: str
    admin_token: str
    controller: Controller

    @property
    def settings(self) -> Settings:
        return self.server.settings

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def _free_socket(host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthcheck", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def kill_local_jobs(server_data_dir: Path) -> None:
    """Kill the processes of every job the server's local agent held (by the job's marker
    in their environment, as the agent itself finds them)."""
    jobs_dir = local_paths(server_data_dir).data_dir / "jobs"
    if not jobs_dir.is_dir():
        return
    for job in jobs_dir.iterdir():
        for process in proctable.job_processes(-1, job.name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(process.pid, signal.SIGKILL)


@contextmanager
def running_server(
    tmp_path: Path,
    factory: Callable[[Settings, Store], Controller] | None,
    **overrides: object,
) -> Iterator[Running]:
    """`factory` None: the composition root's own controller (`reconciler.engine`, wired to
    the PR bot and the request stats as `dockyard server` wires it)."""
    host = str(overrides.get("host", "127.0.0.1"))  # an IPv4 address to listen on
    sock = _free_socket(host)
    port = sock.getsockname()[1]
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "cli_config": tmp_path / "home" / "config.yml",
        "port": port,
        "webhook_secret": WEBHOOK_SECRET,
        "branch": "main",
    }
    values.update(overrides)
    settings = Settings(**values)  # type: ignore[arg-type]
    created: list[Controller] = []

    def make(s: Settings, store: Store) -> Controller:
        assert factory is not None
        created.append(factory(s, store))
        return created[-1]

    server = build_server(settings, controller_factory=make if factory is not None else None)
    config = uvicorn.Config(server.app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://{host}:{port}"
    try:
        wait_until(lambda: _healthy(url), what="the server to answer /healthcheck")
        token = settings.admin_token_path.read_text().strip()
        yield Running(
            server, url, token, created[0] if created else server.app.state.context.controller
        )
    finally:
        uv.should_exit = True
        thread.join(timeout=15)
        server.store.close()
        sock.close()
        # a real controller starts the local agent detached (it outlives a server on
        # purpose), and jobs outlive their agent: neither may outlive the test
        stop_local_agent(settings.data_dir)
        kill_local_jobs(settings.data_dir)
