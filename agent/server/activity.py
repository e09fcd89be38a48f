"""Users' SSH activity per job, for dev environments' ``inactivity_duration``.

The embedded SSH server (``agent.ssh``) reports what it sees: a session for a job opens
and closes (``ssh <run>``, an IDE), a user connection forwards one of a job's ports
(``dockyard attach``) until it closes. The job manager adds the figures to ``JobState``:
``connections`` (open now), ``last_connection_at`` (when the last one closed) and
``no_connections_secs`` (0 while connected, else how long nothing has been connected,
counted from the latest of: the job started running, the last connection closed, this
agent started watching — so an agent restart never makes a job look idler than it was).

An agent without the embedded SSH server does not see connections: the figures stay
None there (``watching`` is False), and the server then enforces nothing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Hashable

from agent.protocol import JobState, JobStatus


class ConnectionActivity:
    """Open user connections per job id; all calls run on the agent's event loop."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._holders: dict[Hashable, set[str]] = {}
        self._open: Counter[str] = Counter()
        self._last_closed: dict[str, float] = {}
        self._watching_since: float | None = None

    def watch(self) -> None:
        """The SSH server is up: from now on connections are counted."""
        if self._watching_since is None:
            self._watching_since = self._clock()

    def opened(self, holder: Hashable, job_id: str) -> None:
        """``holder`` (a session, an SSH connection) uses the job; once per pair."""
        jobs = self._holders.setdefault(holder, set())
        if job_id not in jobs:
            jobs.add(job_id)
            self._open[job_id] += 1

    def closed(self, holder: Hashable) -> None:
        """``holder`` ended: it no longer counts for any job."""
        now = self._clock()
        for job_id in self._holders.pop(holder, set()):
            self._open[job_id] -= 1
            if self._open[job_id] <= 0:
                del self._open[job_id]
            self._last_closed[job_id] = now

    def annotate(self, state: JobState) -> JobState:
        """``state`` with the connection figures (unchanged when not watching)."""
        if self._watching_since is None:
            return state
        count = self._open.get(state.id, 0)
        last = self._last_closed.get(state.id)
        idle: float | None = None
        if state.status is JobStatus.RUNNING:
            now = self._clock()
            since = max(state.started_at or now, last or 0.0, self._watching_since)
            idle = 0.0 if count else max(now - since, 0.0)
        return state.model_copy(
            update={"connections": count, "last_connection_at": last, "no_connections_secs": idle}
        )

    def forget(self, job_id: str) -> None:
        """The job was removed."""
        self._last_closed.pop(job_id, None)
