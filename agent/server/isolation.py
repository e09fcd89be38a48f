"""Where a job without an image runs: in a container of the default image, or as a process.

The agent's ``--job-isolation`` (``DOCKYARD_JOB_ISOLATION``) decides it, as dstack runs
every job in a container (of its default image when the run names none):

- ``auto`` (the default): when the host's Docker engine answers and has the default image
  (``--default-image``, dstack's ``dstackai/base``) locally, the job runs in a container of
  it, as a job with ``image:`` does: no Dockyard data dir and no Docker socket is mounted.
  When the engine answers but the image is not there, or the job wants NVIDIA GPUs and the
  engine has no ``nvidia`` runtime, the job runs as a process under the job account, and
  its ``notice`` says why and how to get a container. Without Docker: a process job.
- ``container``: always a container; the image is pulled when missing (a failed pull fails
  the job, naming the image); without an engine the job is refused.
- ``process``: never a container (the behaviour before this setting existed).

The engine is asked at most once per ``PROBE_TTL`` seconds per agent (ping, the image,
the runtimes; an engine silent for ``PROBE_TIMEOUT`` counts as none), never per request
to ``/host``. ``JobManager.submit`` calls ``place``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.protocol import ErrorCode, ExecutorKind, GpuVendor, JobSpec
from agent.server.errors import AgentError

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "dstackai/base:0.11-base-ubuntu22.04"  # dstack's, for runs without `image`
LABEL_DEFAULT_IMAGE = "dockyard.default-image"  # on containers of the default image
PROBE_TTL = 30.0
PROBE_TIMEOUT = 5.0  # an engine that does not answer by then counts as none (until the TTL)


class Isolation(enum.StrEnum):
    AUTO = "auto"
    CONTAINER = "container"
    PROCESS = "process"


@dataclass(frozen=True)
class EngineFacts:
    """What the agent's Docker engine said (all False: no engine answered)."""

    answers: bool = False
    has_image: bool = False
    nvidia: bool = False  # an `nvidia` runtime: containers can get NVIDIA GPUs


EngineProbe = Callable[[str], Awaitable[EngineFacts]]


@dataclass(frozen=True)
class Placement:
    spec: JobSpec
    notice: str = ""


def decide(mode: Isolation, facts: EngineFacts, spec: JobSpec, image: str) -> Placement:
    """Where ``spec`` runs (pure): a docker spec of ``image``, or ``spec`` with a notice."""
    if spec.executor != ExecutorKind.PROCESS or spec.image or mode == Isolation.PROCESS:
        return Placement(spec)
    if mode == Isolation.CONTAINER:
        if not facts.answers:
            raise AgentError(
                ErrorCode.EXECUTOR_UNAVAILABLE,
                "this agent runs every job in a container (--job-isolation container) and no "
                "Docker engine answers: start Docker, or run the agent with --job-isolation "
                "auto or process",
            )
        return Placement(_in_container(spec, image))
    if not facts.answers:
        return Placement(spec)
    fix = f"pre-pull it (`docker pull {image}`) or run the agent with --job-isolation container"
    if not facts.has_image:
        why = f"the default image {image} is not on this host: {fix}"
    elif spec.gpus and spec.gpu_vendor == GpuVendor.NVIDIA and not facts.nvidia:
        why = (
            f"the job has NVIDIA GPUs and the Docker engine has no `nvidia` runtime: install "
            f"the NVIDIA container toolkit to run it in a container of {image}"
        )
    else:
        return Placement(_in_container(spec, image))
    return Placement(spec, f"running as a process on the host, not in a container: {why}")


def _in_container(spec: JobSpec, image: str) -> JobSpec:
    labels = {**spec.labels, LABEL_DEFAULT_IMAGE: image}
    return spec.model_copy(
        update={"executor": ExecutorKind.DOCKER, "image": image, "labels": labels}
    )


class JobIsolation:
    """The agent's ``--job-isolation`` with its cached view of the engine."""

    def __init__(
        self,
        mode: Isolation,
        image: str,
        probe: EngineProbe | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = PROBE_TTL,
    ) -> None:
        self.mode = mode
        self.image = image
        self._probe = probe  # None: no Docker executor on this agent
        self._clock = clock
        self._ttl = ttl
        self._cached: tuple[float, EngineFacts] | None = None
        self._lock = asyncio.Lock()

    async def place(self, spec: JobSpec) -> Placement:
        if spec.executor != ExecutorKind.PROCESS or spec.image or self.mode == Isolation.PROCESS:
            return Placement(spec)
        placement = decide(self.mode, await self.facts(), spec, self.image)
        if placement.notice:
            log.warning("job %s: %s", spec.id, placement.notice)
        return placement

    async def facts(self) -> EngineFacts:
        async with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < self._ttl:
                return self._cached[1]
            facts = EngineFacts()
            if self._probe is not None:
                try:
                    facts = await asyncio.wait_for(self._probe(self.image), PROBE_TIMEOUT)
                except TimeoutError:
                    log.warning("the Docker engine did not answer in %.0f s", PROBE_TIMEOUT)
            self._cached = (self._clock(), facts)
            return facts
