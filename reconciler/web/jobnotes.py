"""What the proxy and `runs/forward` tell a job's owner when a job's port is not the job's.

The agent (or, for the local fleet's loopback path, the proxy itself) refuses a connection
to a job's port that another process holds (`agent.server.portholders`): the caller gets
`502` (the proxy) or close code `1014` (`runs/forward`) with the reason, and the job gets an
event saying so. `JobNotes` writes those events, at most one per job per `every` seconds,
so a caller retrying in a loop cannot fill the events table. Built by the composition root
(`reconciler.app`) over the web's `Database`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from agent.server.portholders import NOT_THE_JOBS
from reconciler.adapters.db.readmodels.database import Database
from reconciler.adapters.db.readmodels.jobnotes import note_forwarded_job, note_job


def is_port_refusal(reason: str) -> bool:
    """Whether a refused channel's reason is a port held by another process."""
    return NOT_THE_JOBS in reason


class JobNotes:
    """Events about jobs from requests, throttled per job (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        *,
        every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._db = db
        self._every = every
        self._clock = clock
        self._now = now
        self._last: dict[str, float] = {}

    def _due(self, key: str) -> bool:
        at = self._clock()
        self._last = {k: t for k, t in self._last.items() if at - t < self._every}
        if key in self._last:
            return False
        self._last[key] = at
        return True

    async def job(self, job_id: str, message: str) -> None:
        if self._due(job_id):
            await self._db.write(note_job, job_id, message, self._now())

    async def forwarded(
        self, project_id: str, run_name: str, replica_num: int, job_num: int, message: str
    ) -> None:
        key = f"{project_id}/{run_name}/{replica_num}/{job_num}"
        if self._due(key):
            await self._db.write(
                note_forwarded_job, project_id, run_name, replica_num, job_num, message, self._now()
            )
