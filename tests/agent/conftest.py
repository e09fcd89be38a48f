"""Fixtures for agent tests: a real agent in-process (HTTP on 127.0.0.1, port 0) or as a
subprocess (``python -m agent serve``, for SIGKILL tests), and an httpx client to it.

GPU tools are replaced by a ``ToolRunner`` that answers with recorded ``nvidia-smi``
output, so allocation can be tested on a machine without GPUs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from agent.protocol import API_PREFIX, JobState, JobStatus
from agent.server.gpus import NVIDIA_INFO_ARGS, NVIDIA_METRICS_ARGS
from agent.server.serving import AgentConfig, start_agent
from tests.services.docker import DockerEngine, docker_engine  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).parent / "recorded"
DEADLINE = 30.0
LOOP = "while :; do sleep 0.05; done"  # a job command that runs until stopped


def recorded_tools(gpus: bool) -> Callable[[tuple[str, ...]], Awaitable[str | None]]:
    """A ToolRunner: recorded nvidia-smi output for a 4-GPU host, or no tools at all."""
    answers: dict[tuple[str, ...], str] = {
        NVIDIA_INFO_ARGS: (RECORDED / "nvidia-smi-info.csv").read_text(),
        NVIDIA_METRICS_ARGS: (RECORDED / "nvidia-smi-metrics.csv").read_text(),
    }

    async def run(argv: tuple[str, ...]) -> str | None:
        return answers.get(argv) if gpus else None

    return run


async def wait_for(
    probe: Callable[[], Awaitable[Any]], what: str, deadline: float = DEADLINE
) -> Any:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` at the deadline."""
    end = time.monotonic() + deadline
    while True:
        result = await probe()
        if result:
            return result
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@dataclass
class AgentApi:
    """An httpx client on the agent's API, with the few calls tests repeat."""

    http: httpx.AsyncClient
    data_dir: Path

    async def submit(self, **spec: Any) -> httpx.Response:
        spec.setdefault("run_name", "run")
        return await self.http.post("/jobs", json=spec)

    async def state(self, job_id: str) -> JobState:
        response = await self.http.get(f"/jobs/{job_id}")
        response.raise_for_status()
        return JobState.model_validate_json(response.content)

    async def wait_status(self, job_id: str, *statuses: JobStatus) -> JobState:
        async def probe() -> JobState | None:
            state = await self.state(job_id)
            return state if state.status in statuses else None

        result: JobState = await wait_for(probe, f"job {job_id} to be {statuses}")
        return result

    async def wait_finished(self, job_id: str) -> JobState:
        return await self.wait_status(
            job_id, JobStatus.EXITED, JobStatus.FAILED, JobStatus.TERMINATED
        )

    async def wait_log(self, job_id: str, needle: bytes) -> bytes:
        async def probe() -> bytes | None:
            data = await self.read_log(job_id)
            return data if needle in data else None

        result: bytes = await wait_for(probe, f"{needle!r} in the log of {job_id}")
        return result

    async def read_log(self, job_id: str, offset: int = 0, limit: int = 16 * 2**20) -> bytes:
        """The log from ``offset`` up to its end at the time of the last request."""
        chunks = []
        while True:
            response = await self.http.get(
                f"/jobs/{job_id}/logs", params={"offset": offset, "limit": limit}
            )
            response.raise_for_status()
            assert int(response.headers["X-Log-Offset"]) == offset
            chunks.append(response.content)
            offset = int(response.headers["X-Next-Offset"])
            if len(response.content) < limit:
                return b"".join(chunks)


def _client(port: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}{API_PREFIX}", timeout=30)


@pytest.fixture
def docker_client(docker_engine: DockerEngine) -> Iterator[docker.DockerClient]:  # noqa: F811
    """A client of the test Docker engine, closed after the test."""
    client = docker_engine.client()
    yield client
    client.close()


@pytest.fixture
def agent_config(tmp_path: Path) -> AgentConfig:
    return AgentConfig(
        data_dir=tmp_path / "agent", http_port=0, docker=False, tool_runner=recorded_tools(False)
    )


@pytest.fixture
async def agent(agent_config: AgentConfig) -> AsyncIterator[AgentApi]:
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        yield AgentApi(http, agent_config.data_dir)
        await _stop_all(http)


async def _stop_all(http: httpx.AsyncClient) -> None:
    """Jobs outlive their agent by design: a test that failed half-way must not leave its
    jobs running (a busy loop left behind slows every later test on the machine)."""
    for job in (await http.get("/jobs")).json():
        if job.get("status") not in ("exited", "failed", "terminated"):
            await http.post(f"/jobs/{job['id']}/stop", json={"force": True})


@dataclass
class AgentProcess:
    """``python -m agent serve`` as a child process, which a test may SIGKILL."""

    data_dir: Path
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    def _spawn(self) -> subprocess.Popen[bytes]:
        (self.data_dir / "agent.json").unlink(missing_ok=True)
        argv = [sys.executable, "-m", "agent", "serve", "--data-dir", str(self.data_dir)]
        with open(self.data_dir.parent / "agent.stderr", "ab") as stderr:
            return subprocess.Popen(
                # jobs write to the test's temp dir: they run as the agent's own user
                [*argv, "--http-port", "0", "--job-user", "self", *self.extra_args],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    async def start(self) -> AgentApi:
        self.process = self._spawn()

        async def ready() -> dict[str, Any] | None:
            assert self.process is not None and self.process.poll() is None, "agent exited"
            path = self.data_dir / "agent.json"
            return json.loads(path.read_text()) if path.exists() else None

        info = await wait_for(ready, "the agent to serve")
        return AgentApi(_client(int(info["http_port"])), self.data_dir)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def agent_process(tmp_path: Path) -> Iterator[AgentProcess]:
    data_dir = tmp_path / "agent"
    data_dir.mkdir()
    handle = AgentProcess(data_dir)
    yield handle
    handle.terminate()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False
