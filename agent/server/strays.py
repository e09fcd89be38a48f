"""Stray processes: processes of this agent's jobs that the agent does not supervise.

A job the agent does not know (removed, its record lost, never known to this data dir's
current agent) or knows as finished must have no process left. Every process job carries
``DOCKYARD_JOB_AGENT=<this agent's tag>`` beside its ``DOCKYARD_JOB_ID``
(``executors/proctable.py``), so the agent finds them without the job's record and kills
them: once when it starts, every ``SWEEP_SECONDS`` after, and for one job id at once when
asked to stop a job it does not know (``JobManager.stop``). Container jobs carry the same
tag as the label ``dockyard.agent``, and their running containers are killed likewise
(``executors/docker.py``). Processes and containers of other agents' jobs (other data
dirs) are never touched. Used by ``JobManager``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Iterable

from agent.server.executors.base import Executor, Sweeping

log = logging.getLogger(__name__)

SWEEP_SECONDS = 60.0


class StraySweeper:
    """Kills stray job processes; ``known()`` gives the ids of the unfinished jobs."""

    def __init__(
        self,
        executors: Iterable[Executor],
        known: Callable[[], Collection[str]],
        every: float = SWEEP_SECONDS,
    ) -> None:
        self._sweepers = [e for e in executors if isinstance(e, Sweeping)]
        self._known = known
        self._every = every
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """One pass now, then one every ``every`` seconds."""
        await self._pass()
        self._task = asyncio.create_task(self._loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def sweep(self, only: str | None = None) -> int:
        """Kill the strays now (``only``: of that job id); how many processes were found."""
        found = 0
        for executor in self._sweepers:
            strays = await executor.sweep(self._known, only)
            for job_id, count in strays.items():
                log.warning(
                    "killed %d process(es) of job %s, which this agent does not run", count, job_id
                )
            found += sum(strays.values())
        return found

    async def _pass(self) -> None:
        try:
            await self.sweep()
        except Exception:  # a failed pass (e.g. /proc unreadable) is tried again
            log.exception("sweeping stray job processes failed")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._every)
            await self._pass()
