"""Following each host agent's job events and waking the jobs they name.

One long-poll per agent (``AgentClient.job_events``, contract in ``agent/jobevents.py``)
through that host's SSH connection: when the agent says a job changed state or printed
output, the job's row is made due at once (`JobWakes.wake`, one statement per page) and the
jobs worker is hinted, so the store learns of a job's start or end within milliseconds and
running jobs need no quick polls. When the events cannot say what was missed (the first
page, another agent process, too far behind) or the agent cannot be reached, every
unfinished job on that instance is woken and looks for itself.

An agent that says a job started (a `state` event, status `running`) also has it recorded
`running` at once (`AgentStates.record_agent_running`, one transaction: a job still stored
`pulling` and in no worker's hands), so the store does not wait for the job's pass to learn
it; the pass still follows (ports, probes, logs).

`JobEventFollower.follow(instance_id, client)` is idempotent and cheap: the
`AgentDirectory` calls it whenever a worker asks for an agent's client, so a host is
followed from the first time the server speaks to it. `following(instance_id)` tells the
jobs worker whether it may rely on the events (then a running job's regular pass is rare)
or must poll (an agent of an older build, or one unreachable right now).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from agent.client import AgentClient, AgentError
from agent.jobevents import MAX_WAIT_SECONDS, JobEventKind, JobEventsPage
from agent.protocol import ErrorCode
from agent.protocol import JobStatus as AgentStatus
from agent.tunnel import AgentUnreachable
from reconciler.ports import WorkKind

log = logging.getLogger(__name__)

RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class JobWakes(Protocol):
    """The store's wakes, as the follower needs them (`StoreLeasing` implements them)."""

    async def wake(self, kind: WorkKind, row_ids: Sequence[str]) -> int: ...

    async def wake_jobs_on_instance(self, instance_id: str) -> int: ...


class AgentStates(Protocol):
    """The store's record of an agent's job states (`Store` implements it)."""

    def record_agent_running(
        self, instance_id: str, agent_job_ids: Sequence[str]
    ) -> Sequence[str]: ...


class JobEventFollower:
    """See the module docstring."""

    def __init__(
        self,
        wakes: JobWakes,
        hint: Callable[[WorkKind], None],
        *,
        wait: float = 25.0,
        retry: Sequence[float] = RETRY_SECONDS,
        states: AgentStates | None = None,
    ) -> None:
        self._wakes = wakes
        self._states = states
        self._hint = hint
        self._wait = min(wait, MAX_WAIT_SECONDS)
        self._retry = tuple(retry)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._live: set[str] = set()
        self._closed = False

    def follow(self, instance_id: str, client: AgentClient) -> None:
        """Follow the agent of `instance_id` (no-op if already followed or closed)."""
        if self._closed or instance_id in self._tasks:
            return
        with contextlib.suppress(RuntimeError):  # no running loop (sync callers): skip
            self._tasks[instance_id] = asyncio.get_running_loop().create_task(
                self._follow(instance_id, client), name=f"job-events-{instance_id}"
            )

    def following(self, instance_id: str) -> bool:
        """True while the instance's agent events are read (a job there may sleep long)."""
        return instance_id in self._live

    def open(self) -> None:
        """Follow again after `aclose` (a controller started again)."""
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._live.clear()

    async def _follow(self, instance_id: str, client: AgentClient) -> None:
        since, epoch, failures = 0, "", 0
        while True:
            try:
                page = await client.job_events(since, epoch, wait=self._wait)
            except AgentUnreachable:
                await self._lost(instance_id, failures)
                failures += 1
                continue
            except AgentError as exc:
                if exc.code == ErrorCode.NOT_FOUND.value:  # an agent without events
                    log.info("%s: agent has no job events; its jobs are polled", client.name)
                    self._live.discard(instance_id)
                    return
                await self._lost(instance_id, failures)
                failures += 1
                continue
            except Exception:  # the outermost loop of one host: log, retry, go on
                log.exception("%s: reading job events failed", client.name)
                await self._lost(instance_id, failures)
                failures += 1
                continue
            failures = 0
            self._live.add(instance_id)
            try:
                if page.reset:
                    woken = await self._wakes.wake_jobs_on_instance(instance_id)
                else:
                    await self._record_running(instance_id, page)
                    ids = list(dict.fromkeys(event.job_id for event in page.events))
                    woken = await self._wakes.wake("jobs", ids)
            except Exception:  # a store hiccup: the jobs' own passes cover it
                log.exception("%s: waking jobs failed", client.name)
                woken = 0
            if woken:
                self._hint("jobs")
            since, epoch = page.seq, page.epoch

    async def _record_running(self, instance_id: str, page: JobEventsPage) -> None:
        """Jobs the page says started: recorded `running` now (their runs hinted)."""
        started = [
            event.job_id
            for event in page.events
            if event.kind is JobEventKind.STATE and event.status == AgentStatus.RUNNING.value
        ]
        if self._states is None or not started:
            return
        states = self._states
        recorded = await asyncio.to_thread(states.record_agent_running, instance_id, started)
        if recorded:
            self._hint("runs")

    async def _lost(self, instance_id: str, failures: int) -> None:
        """The feed broke: the jobs there poll for themselves until it is back."""
        if instance_id in self._live:
            self._live.discard(instance_id)
            with contextlib.suppress(Exception):
                if await self._wakes.wake_jobs_on_instance(instance_id):
                    self._hint("jobs")
        await asyncio.sleep(self._retry[min(failures, len(self._retry) - 1)])
