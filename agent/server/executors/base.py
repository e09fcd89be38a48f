"""What the job manager asks of an executor, and how an executor says it failed.

An executor is stateless across agent restarts: everything it needs to find a job again
is in the job's files (``JobFiles``) or labelled on the container. The manager calls:

0. ``check`` at submit time (a spec this executor cannot run is refused at once);
1. ``prepare`` (pull an image; may report progress), then ``launch``; or, after a
   restart, ``adopt`` instead of both;
2. ``wait``: returns when the job ended, with its exit status (``None`` when the job
   vanished without one), after its output is on disk;
3. ``signal`` (SIGTERM, or SIGKILL with ``kill=True``) to every process of the job;
4. ``sample`` for metrics, ``remove`` to clean up a finished job.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agent.protocol import ExecutorKind, JobReason, JobSpec, PortMapping
from agent.server.store import JobFiles

ProgressCallback = Callable[[float | None], None]


class ExecutorError(Exception):
    """The executor could not run the job; ``reason`` goes into ``JobState.reason``."""

    def __init__(self, reason: JobReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Launched:
    """What the manager learns from a launched (or adopted) job."""

    pid: int | None = None
    container_id: str | None = None
    ports: list[PortMapping] = field(default_factory=list)


@dataclass(frozen=True)
class Usage:
    """Cumulative CPU seconds and current memory of all the processes of a job."""

    cpu_seconds: float
    memory_bytes: int


class Executor(Protocol):
    kind: ExecutorKind

    async def is_available(self) -> bool: ...

    def check(self, spec: JobSpec) -> str | None:
        """Why this executor cannot run ``spec`` at all (answered as 422), or None."""

    async def prepare(self, spec: JobSpec, files: JobFiles, progress: ProgressCallback) -> None:
        """Make the job launchable (pull the image). Raises ``ExecutorError``."""

    async def launch(self, spec: JobSpec, files: JobFiles) -> Launched:
        """Start the job. Raises ``ExecutorError``."""

    async def adopt(self, spec: JobSpec, files: JobFiles) -> Launched | None:
        """Find a job launched earlier; None when it was never launched or is gone.

        Raises ``EngineUnavailableError`` when it cannot tell now (the manager retries).
        """

    async def wait(self, spec: JobSpec, files: JobFiles) -> int | None:
        """Wait for the end of the job; its exit status, None if it vanished without one.

        Raises ``EngineUnavailableError`` when the engine went away meanwhile.
        """

    async def signal(self, spec: JobSpec, files: JobFiles, *, kill: bool) -> None: ...

    async def sample(self, spec: JobSpec, files: JobFiles) -> Usage: ...

    async def remove(self, spec: JobSpec, files: JobFiles) -> None: ...

    async def close(self) -> None:
        """Let go of the jobs (they keep running) and of engine connections."""


@runtime_checkable
class Sweeping(Protocol):
    """An executor that can find its jobs' processes without the job's record."""

    async def sweep(
        self, known: Callable[[], Collection[str]], only: str | None = None
    ) -> dict[str, int]:
        """Kill the processes of this agent's jobs not in ``known()`` (``only``: of that
        job id alone); {job id: processes found}."""


WAIT_FOR_CHILD = """child=$!
while :; do
  wait "$child"; status=$?
  [ "$status" -le 128 ] && break
  kill -0 "$child" 2>/dev/null && continue
  wait "$child"; again=$?
  [ "$again" -ne 127 ] && status=$again
  break
done
"""
"""The shell lines both job inits (the process wrapper, a container's PID 1) run after
starting the job's shell in the background: wait for it, leaving `$status` its exit
status. `wait` returns above 128 both when the child died of a signal and when a trap of
the init interrupted it; then, if the child is gone, a second `wait` returns the status
it ended with meanwhile (127: none left to report, the first answer was the real one)."""
