"""The agent's job event feed: numbered changes of its jobs, served as a long-poll.

``JobEventFeed`` keeps the last events in memory (nothing is read from disk to answer):
the job manager publishes a ``state`` event whenever a job's status or stop order moves,
and the feed itself publishes ``output`` when the log of a running job has grown (it
looks at the sizes of those logs at most once per ``output_interval``, and only while
someone follows the feed). A job's end event carries its final state and, when short, its
log (``JobEnd``: built by the job manager once, as the job ends). ``router`` serves
``GET /jobs/events`` (``agent/jobevents.py`` describes the contract); ``app.create_app``
mounts it ahead of ``/jobs/{job_id}``.

``settled`` is how ``POST /jobs`` answers: once the new job has left ``pending`` (it runs,
pulls its image, or already ended) or after ``SUBMIT_SETTLE_SECONDS``, so the server can
record ``running`` from the submit itself instead of a second look (a process job starts
within milliseconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query

from agent.jobevents import (
    EVENTS_PATH,
    MAX_EVENTS_PER_PAGE,
    MAX_WAIT_SECONDS,
    JobEnd,
    JobEvent,
    JobEventKind,
    JobEventsPage,
)
from agent.protocol import JobState, JobStatus

RunningLogs = Callable[[], Iterable[tuple[str, Path]]]
"""The (job id, log path) of every running job (the job manager's, in memory)."""
SUBMIT_SETTLE_SECONDS = 1.0
"""How long the answer to a submit waits for the job to leave ``pending``."""


LINGER_SECONDS = 0.01
"""How long a long-poll woken by an event waits for more before it answers (a page that
had news when asked answers at once): a few more events per page in a burst, for at most
this much later news."""


class JobEventFeed:
    """See the module docstring. All methods run on the agent's event loop."""

    def __init__(
        self,
        *,
        running_logs: RunningLogs | None = None,
        keep: int = 10_000,
        output_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        linger: float = LINGER_SECONDS,
    ) -> None:
        self.epoch = uuid.uuid4().hex
        self._seq = 0
        self._events: deque[JobEvent] = deque(maxlen=keep)
        self._published = asyncio.Event()
        self._running_logs = running_logs
        self._output_interval = output_interval
        self._clock = clock
        self._linger = linger
        self._sizes: dict[str, int] = {}
        self._last_followed = float("-inf")
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def seq(self) -> int:
        return self._seq

    def publish(
        self, job_id: str, kind: JobEventKind, status: str = "", end: JobEnd | None = None
    ) -> None:
        self._seq += 1
        event = JobEvent(seq=self._seq, job_id=job_id, kind=kind, status=status, end=end)
        self._events.append(event)
        published, self._published = self._published, asyncio.Event()
        published.set()

    def page(self, since: int, epoch: str) -> JobEventsPage:
        """The events after `since` (at most a page); `reset` if the reader missed some."""
        oldest = self._events[0].seq if self._events else self._seq + 1
        if epoch != self.epoch or since > self._seq or since + 1 < oldest:
            return JobEventsPage(epoch=self.epoch, seq=self._seq, reset=True)
        start = since + 1 - oldest
        events = list(itertools.islice(self._events, start, start + MAX_EVENTS_PER_PAGE))
        seq = events[-1].seq if events else since
        return JobEventsPage(epoch=self.epoch, seq=seq, events=events)

    async def wait(
        self, since: int, epoch: str, wait: float, *, linger: float | None = None
    ) -> JobEventsPage:
        """`page` now if it has news, else once something is published (and `linger`
        later: the feed's own by default, 0 for a reader in the agent) or `wait` passed."""
        self._follow()
        page = self.page(since, epoch)
        if page.events or page.reset or wait <= 0 or self._stopping:
            return page
        published = self._published
        try:
            await asyncio.wait_for(published.wait(), timeout=wait)
        except TimeoutError:
            return self.page(since, epoch)
        linger = self._linger if linger is None else linger
        if linger > 0 and not self._stopping:
            # Woken by the first event: what the next moments publish (other jobs ending
            # in a burst) goes in the same page, one answer for many instead of one each.
            await asyncio.sleep(linger)
        return self.page(since, epoch)

    async def published(self, within: float) -> None:
        """Return once the next event is published, or after `within` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._published.wait(), timeout=max(within, 0.0))

    def stop(self) -> None:
        """The agent is leaving: answer every long-poll now and make none wait from now on
        (one held open would hold the agent's shutdown up to ``MAX_WAIT_SECONDS``)."""
        self._stopping = True
        self._published.set()

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None

    # -- output: logs that grew ----------------------------------------------------------

    def _follow(self) -> None:
        """Someone reads the feed: (re)start looking at log sizes while they do."""
        self._last_followed = self._clock()
        if self._running_logs is not None and (self._watcher is None or self._watcher.done()):
            self._watcher = asyncio.create_task(self._watch_output(), name="job-output-events")

    async def _watch_output(self) -> None:
        # Stops once nobody has asked for events for a while (a server long gone).
        while self._clock() - self._last_followed < 2 * MAX_WAIT_SECONDS:
            await asyncio.sleep(self._output_interval)
            self.check_output()

    def check_output(self) -> None:
        """Publish `output` for each running job whose log grew since the last look. At a
        job's first look nothing is news yet: what it printed by then is, at the next look,
        if it still runs (a job that ends first brings its log with its end, and a tiny
        task then costs its reader no pass for its output)."""
        assert self._running_logs is not None
        sizes: dict[str, int] = {}
        for job_id, path in self._running_logs():
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            before = self._sizes.get(job_id)
            sizes[job_id] = 0 if before is None else size  # first look: all of it news next
            if before is not None and size > before:
                self.publish(job_id, JobEventKind.OUTPUT)
        self._sizes = sizes


async def settled(
    feed: JobEventFeed,
    state: Callable[[], JobState],
    *,
    within: float = SUBMIT_SETTLE_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> JobState:
    """`state()` once it is no longer ``pending`` (every change of it is published on
    `feed`), or as it is after `within` seconds."""
    deadline = clock() + within
    current = state()
    while current.status is JobStatus.PENDING and (left := deadline - clock()) > 0:
        await feed.published(left)
        current = state()
    return current


def router(feed: JobEventFeed) -> APIRouter:
    """``GET /jobs/events?since=&epoch=&wait=`` over `feed` (see ``agent/jobevents.py``)."""
    routes = APIRouter()

    @routes.get(EVENTS_PATH)
    async def job_events(
        since: Annotated[int, Query(ge=0)] = 0,
        epoch: Annotated[str, Query(max_length=64)] = "",
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0.0,
    ) -> JobEventsPage:
        return await feed.wait(since, epoch, wait)

    return routes
