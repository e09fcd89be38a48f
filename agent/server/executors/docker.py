"""The Docker executor: one container per job, through the docker SDK.

``prepare`` pulls the image unless the engine has it (reported as ``pulling`` with the
fraction of bytes done); ``launch`` creates and starts the container named
``dockyard-<job-id>`` and labelled ``dockyard.job-id`` and ``dockyard.agent`` (arguments
from ``containers.to_container_kwargs``); ``sweep`` kills the running containers of this
agent's jobs that it does not run (``strays.py``), never another agent's. Its output goes
to the job's log file: written by the container's shell itself when the job has commands,
else copied from the engine's logs by a ``LogFollower``. A restarted agent finds the
container by label (``adopt``).

The SDK is synchronous: short calls run in worker threads, the calls that block for the
life of a job (wait, log stream) in daemon threads, so that they never hold up the
agent's exit. Engine connection errors become ``EngineUnavailableError`` (the manager
waits and asks again); other engine refusals become ``ExecutorError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import docker.utils
import requests.exceptions

from agent.protocol import ExecutorKind, JobReason, JobSpec
from agent.server.archives import container_tar, resolve_path_env
from agent.server.errors import EngineUnavailableError
from agent.server.executors.base import ExecutorError, Launched, ProgressCallback, Usage
from agent.server.executors.containers import (
    LABEL_AGENT,
    LABEL_JOB_ID,
    amd_device_groups,
    container_name,
    is_logging_to_file,
    to_container_kwargs,
    to_port_mappings,
    to_pull_fraction,
)
from agent.server.executors.dockerlogs import LogFollower
from agent.server.isolation import LABEL_DEFAULT_IMAGE, EngineFacts
from agent.server.mounts import DEFAULT_VOLUME_ROOTS, resolved_volume, volume_problem
from agent.server.store import JobFiles

T = TypeVar("T")
API_TIMEOUT = 60
_UNREACHABLE = (requests.exceptions.ConnectionError, ConnectionError)


class DockerExecutor:
    """Runs jobs as containers of the engine at ``base_url`` (None: the environment's)."""

    kind = ExecutorKind.DOCKER

    def __init__(
        self,
        base_url: str | None = None,
        *,
        allow_privileged: bool = True,
        protected: Sequence[Path] = (),
        volume_dirs: Sequence[Path] = (),
        volume_roots: Sequence[Path] = DEFAULT_VOLUME_ROOTS,
        agent_tag: str = "",
    ) -> None:
        self._base_url = base_url
        self.agent_tag = agent_tag  # labels our containers; "" (tests): no sweeping
        self._allow_privileged = allow_privileged  # off: `privileged` jobs are refused
        self._protected = tuple(protected)  # no job mounts these, or a dir above them
        self._volume_dirs = tuple(volume_dirs)  # ... except volumes inside these
        self._volume_roots = tuple(volume_roots)  # other volumes only below these
        self._clients: dict[bool, docker.DockerClient] = {}
        self._clients_lock = threading.Lock()  # clients are made in worker threads
        self._followers: dict[str, LogFollower] = {}
        self._containers: dict[str, str] = {}

    def _client(self, *, streaming: bool = False) -> docker.DockerClient:
        """A client; the streaming one has no read timeout (waits and log streams)."""
        with self._clients_lock:
            return self._make_client(streaming)

    def _make_client(self, streaming: bool) -> docker.DockerClient:
        if streaming not in self._clients:
            timeout: Any = None if streaming else API_TIMEOUT  # None: no read timeout
            try:
                self._clients[streaming] = (
                    docker.DockerClient(base_url=self._base_url, timeout=timeout)
                    if self._base_url
                    else docker.from_env(timeout=timeout)
                )
            except docker.errors.DockerException as error:
                raise EngineUnavailableError(f"no Docker engine answers: {error}") from error
        return self._clients[streaming]

    async def is_available(self) -> bool:
        def ping() -> bool:
            return bool(self._client().ping())

        try:
            return await asyncio.to_thread(ping)
        except (EngineUnavailableError, docker.errors.DockerException, *_UNREACHABLE):
            return False

    async def engine_facts(self, image: str) -> EngineFacts:
        """Whether the engine answers, has ``image`` and an ``nvidia`` runtime (``isolation``)."""

        def ask() -> EngineFacts:
            client = self._client()
            client.ping()
            try:
                client.images.get(image)
                has_image = True
            except docker.errors.ImageNotFound:
                has_image = False
            runtimes = client.info().get("Runtimes") or {}
            return EngineFacts(answers=True, has_image=has_image, nvidia="nvidia" in runtimes)

        try:
            return await asyncio.to_thread(ask)
        except (EngineUnavailableError, docker.errors.DockerException, *_UNREACHABLE):
            return EngineFacts()

    def check(self, spec: JobSpec) -> str | None:
        if not spec.image:
            return "a docker job needs an image"
        if spec.privileged and not self._allow_privileged:
            return (
                "privileged: a privileged container is root on the host, and this host runs "
                "none (its agent was started without --allow-root-jobs)"
            )
        return self._volumes_problem(spec)

    def _volumes_problem(self, spec: JobSpec) -> str | None:
        for volume in spec.volumes:
            problem = volume_problem(
                volume.host_path, self._volume_roots, self._protected, self._volume_dirs
            )
            if problem is not None:
                return problem
        return None

    async def prepare(self, spec: JobSpec, files: JobFiles, progress: ProgressCallback) -> None:
        loop = asyncio.get_running_loop()

        def report(fraction: float | None) -> None:
            loop.call_soon_threadsafe(progress, fraction)

        try:
            await _call(lambda: _pull(self._client(streaming=True), str(spec.image), report))
        except ExecutorError as error:
            if LABEL_DEFAULT_IMAGE not in spec.labels:
                raise
            raise ExecutorError(
                error.reason,
                f"{error.message} (the agent's default image, for runs without `image:`: "
                "pre-pull it on the host, set --default-image to an image the host can pull, "
                "or run the agent with --job-isolation auto or process)",
            ) from error

    async def launch(self, spec: JobSpec, files: JobFiles) -> Launched:
        files.log.chmod(0o622)  # the container's user may not be ours: append, never read
        # checked at submit; a link may have been planted since (`mounts`): look again and
        # give the engine the resolved paths that were checked
        problem = self._volumes_problem(spec)
        if problem is not None:
            raise ExecutorError(JobReason.EXECUTOR_ERROR, problem)
        mounted = spec.model_copy(
            update={
                "volumes": [
                    v.model_copy(update={"host_path": resolved_volume(v.host_path)})
                    for v in spec.volumes
                ]
            }
        )

        def create() -> tuple[str, dict[str, Any]]:
            client = self._client()
            _remove_stale(client, spec.id)
            kwargs = to_container_kwargs(
                mounted, str(files.log), amd_device_groups(spec), self.agent_tag
            )
            work_dir = _work_dir(client, spec) if spec.archives or spec.path_env else "/"
            kwargs["environment"].update(resolve_path_env(spec.path_env, work_dir))
            payload = container_tar(spec, files.root, work_dir) if spec.archives else None
            container = client.containers.create(**kwargs)
            try:
                if payload is not None:  # the job's files, before anything runs
                    container.put_archive("/", payload)
                container.start()
            except docker.errors.APIError:
                container.remove(force=True)  # created but not runnable: leave nothing
                raise
            container.reload()
            return str(container.id), container.attrs

        container_id, attrs = await _call(create)
        self._follow(spec, files, container_id)
        return Launched(container_id=container_id, ports=to_port_mappings(spec, attrs))

    async def adopt(self, spec: JobSpec, files: JobFiles) -> Launched | None:
        def find() -> tuple[str, dict[str, Any]] | None:
            client = self._client()
            found = client.containers.list(all=True, filters={"label": f"{LABEL_JOB_ID}={spec.id}"})
            return (str(found[0].id), found[0].attrs) if found else None

        located = await _call(find)
        if located is None:
            return None
        self._follow(spec, files, located[0])
        return Launched(container_id=located[0], ports=to_port_mappings(spec, located[1]))

    async def wait(self, spec: JobSpec, files: JobFiles) -> int | None:
        container_id = self._containers.get(spec.id)
        if container_id is None:
            return None
        api = self._client(streaming=True).api
        try:
            result = await _in_daemon_thread(lambda: api.wait(container_id))
        except docker.errors.NotFound:
            result = None
        except _UNREACHABLE as error:
            raise EngineUnavailableError(str(error)) from error
        follower = self._followers.pop(spec.id, None)
        if follower is not None:
            await _in_daemon_thread(follower.finished.wait)
        return int(result["StatusCode"]) if result else None

    async def signal(self, spec: JobSpec, files: JobFiles, *, kill: bool) -> None:
        container_id = self._containers.get(spec.id)
        if container_id is None:
            return
        number = "SIGKILL" if kill else "SIGTERM"
        await _call(lambda: _signal_quietly(self._client(), container_id, number))

    async def sample(self, spec: JobSpec, files: JobFiles) -> Usage:
        container_id = self._containers.get(spec.id)
        if container_id is None:
            return Usage(cpu_seconds=0.0, memory_bytes=0)
        api = self._client().api
        stats = await _call(lambda: api.stats(container_id, stream=False, one_shot=True))
        cpu_ns = ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage", 0)
        memory = stats.get("memory_stats") or {}
        cache = (memory.get("stats") or {}).get("inactive_file", 0)
        used = max(int(memory.get("usage", 0)) - int(cache), 0)
        return Usage(cpu_seconds=cpu_ns / 1e9, memory_bytes=used)

    async def remove(self, spec: JobSpec, files: JobFiles) -> None:
        follower = self._followers.pop(spec.id, None)
        if follower is not None:
            follower.stop()
        self._containers.pop(spec.id, None)
        await _call(lambda: _remove_stale(self._client(), spec.id))

    async def sweep(
        self, known: Callable[[], Collection[str]], only: str | None = None
    ) -> dict[str, int]:
        """Kill the running containers of this agent's jobs not in ``known()`` (asked after
        the listing, so that a job launched meanwhile is known); {job id: 1}. The
        container stays (exited) for the job's ``remove``, or the next launch of its id."""
        if not self.agent_tag:
            return {}
        labels = [f"{LABEL_AGENT}={self.agent_tag}"]
        if only is not None:
            labels.append(f"{LABEL_JOB_ID}={only}")

        def running() -> dict[str, str]:
            found = self._client().containers.list(filters={"label": labels})
            return {str(c.labels.get(LABEL_JOB_ID, "")): str(c.id) for c in found}

        try:
            containers = await _call(running)
        except EngineUnavailableError:
            return {}  # no engine, nothing of ours runs in it now; the next sweep looks again
        active = known()
        strays = {job_id: cid for job_id, cid in containers.items() if job_id not in active}
        for container_id in strays.values():
            await _call(partial(_signal_quietly, self._client(), container_id, "SIGKILL"))
        return dict.fromkeys(strays, 1)

    async def close(self) -> None:
        for follower in self._followers.values():
            follower.stop()
        self._followers.clear()
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _follow(self, spec: JobSpec, files: JobFiles, container_id: str) -> None:
        self._containers[spec.id] = container_id
        if is_logging_to_file(spec):
            return  # the container writes the log itself
        old = self._followers.pop(spec.id, None)
        if old is not None:
            old.stop()
        api = self._client(streaming=True).api

        def frames(since_ns: int) -> Iterable[bytes]:
            since = since_ns / 1e9 - 1 if since_ns else None
            stream: Iterable[bytes] = api.logs(
                container_id, stream=True, follow=True, timestamps=True, since=since
            )
            return stream

        self._followers[spec.id] = LogFollower(files, frames).start()


def _pull(client: docker.DockerClient, image: str, report: Callable[[float | None], None]) -> None:
    """Pull ``image`` unless the engine has it, reporting the fraction of bytes done."""
    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    report(None)
    repository, tag = docker.utils.parse_repository_tag(image)
    layers: dict[str, tuple[int, int]] = {}
    try:
        for event in client.api.pull(repository, tag=tag or "latest", stream=True, decode=True):
            if "error" in event:
                raise ExecutorError(
                    JobReason.IMAGE_NOT_FOUND, f"cannot pull {image}: {event['error']}"
                )
            fraction = to_pull_fraction(layers, event)
            if fraction is not None:
                report(fraction)
    except docker.errors.APIError as error:
        raise ExecutorError(JobReason.IMAGE_NOT_FOUND, f"cannot pull {image}: {error}") from error


def _work_dir(client: docker.DockerClient, spec: JobSpec) -> str:
    """The container's working dir: the spec's, else the image's ``WORKDIR``, else ``/``."""
    if spec.working_dir:
        return spec.working_dir
    config = client.images.get(str(spec.image)).attrs.get("Config") or {}
    return str(config.get("WorkingDir") or "/")


def _signal_quietly(client: docker.DockerClient, container_id: str, number: str) -> None:
    try:
        client.api.kill(container_id, signal=number)
    except docker.errors.APIError as error:
        if error.status_code not in (404, 409):  # gone, or not running
            raise


def _remove_stale(client: docker.DockerClient, job_id: str) -> None:
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_container(container_name(job_id), force=True)


async def _call(function: Callable[[], T]) -> T:
    """Run a short SDK call in a worker thread, translating engine errors."""
    try:
        return await asyncio.to_thread(function)
    except _UNREACHABLE as error:
        raise EngineUnavailableError(f"the Docker engine does not answer: {error}") from error
    except docker.errors.APIError as error:
        raise ExecutorError(
            JobReason.EXECUTOR_ERROR, f"Docker refused: {error.explanation or error}"
        ) from error


def _in_daemon_thread(function: Callable[[], T]) -> asyncio.Future[T]:
    """Run a call that may block for the life of a job in a daemon thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = function()
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
            failure = error
            _post(loop, lambda: settle(lambda: future.set_exception(failure)))
        else:
            _post(loop, lambda: settle(lambda: future.set_result(result)))

    threading.Thread(target=run, daemon=True, name="docker-wait").start()
    return future


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    if not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(callback)
