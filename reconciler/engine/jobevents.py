"""Following each host agent's job events and waking the jobs they name.

One long-poll per agent (``AgentClient.job_events``, contract in ``agent/jobevents.py``)
through that host's SSH connection, however many instances it serves (one per project's
local fleet on the local agent): when the agent says a job changed state or printed
output, the job's row is made due at once (`JobWakes.wake`, one statement per page) and the
jobs worker is hinted, so the store learns of a job's start or end within milliseconds and
running jobs need no quick polls. When the events cannot say what was missed (the first
page, another agent process, too far behind) or the agent cannot be reached, every
unfinished job on that instance is woken and looks for itself.

An agent that says a job started (a `state` event, status `running`) also has it recorded
`running` at once (`AgentStates.record_agent_running`, one transaction: a job still stored
`pulling` and in no worker's hands), so the store does not wait for the job's pass to learn
it; the pass still follows (ports, probes, logs).

An agent that says a job ended sends its end with the event (`agent.jobevents.JobEnd`:
the final state and, when short, the whole log): the follower keeps it (`ended`, at most
`KEEP_ENDS`), so the job's pass records the end without asking the agent again. A start
that the job's own pass learns from its submit's answer (`submitting`/`submitted`) wakes
nobody: a tiny task gets one pass for its start and one for its end, not a third.

No event is dropped on a failed write (a full disk, a lost database connection): the
follower moves past a page only once what it implies is recorded (the wakes, the starts),
retrying the same writes with back-off (`WRITE_RETRY_SECONDS`) meanwhile; the agent keeps
the events (or says it could not: a reset page, and every job there is woken). A lost feed
whose wake of the instance's jobs failed keeps that wake pending until it is done. A write
that fails for another reason than the store refusing it (`store_failure` says which are
refusals; a bug, a row it cannot take) is not retried for ever, holding the host's feed:
logged with its traceback, the page is passed over and every job there woken instead
(each pass asks the agent), that wake pending until done.

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
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from agent.client import AgentClient, AgentError
from agent.jobevents import MAX_WAIT_SECONDS, JobEnd, JobEventKind, JobEventsPage
from agent.protocol import ErrorCode
from agent.protocol import JobStatus as AgentStatus
from agent.tunnel import AgentUnreachable
from reconciler.ports import WorkKind

log = logging.getLogger(__name__)

RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
WRITE_RETRY_SECONDS = (0.25, 0.5, 1.0, 2.0, 4.0)
"""Back-off of a page's writes that the store refused (the last step repeats): short, so
the jobs are woken within seconds of the store taking writes again (docs/operations.md's
full disk)."""
PAGE_GAP = 0.02
"""Seconds between a page that had events and the next poll. An agent answers at once when
news waits, so in a burst of ends each poll came back with one or two events: a page per
ending job, each an HTTP exchange through the tunnel. The gap lets the next page carry
what came meanwhile; the first event after a quiet spell still comes at once."""
KEEP_ENDS = 10_000
"""Job ends kept for their jobs' passes (the oldest dropped first: such a pass asks); as
many submits in flight are remembered (`submitting`)."""
_SUBMITTING, _ANSWERED, _PASSED_OVER = "submitting", "answered", "passed over"


class JobWakes(Protocol):
    """The store's wakes, as the follower needs them (`StoreLeasing` implements them)."""

    async def wake(self, kind: WorkKind, row_ids: Sequence[str]) -> int: ...

    async def wake_jobs_on_instance(self, instance_id: str) -> int: ...


class AgentStates(Protocol):
    """The store's record of an agent's job states (`Store` implements it)."""

    def record_agent_running(
        self, instance_ids: str | Sequence[str], agent_job_ids: Sequence[str]
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
        write_retry: Sequence[float] = WRITE_RETRY_SECONDS,
        states: AgentStates | None = None,
        gap: float = PAGE_GAP,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        store_failure: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self._gap = gap
        self._refused = store_failure or _always  # None: every failed write is a refusal
        self._sleep = sleep
        self._wakes = wakes
        self._states = states
        self._hint = hint
        self._wait = min(wait, MAX_WAIT_SECONDS)
        self._retry = tuple(retry)
        self._write_retry = tuple(write_retry)
        # One feed per agent client (`AgentDirectory`: one per address), whatever number of
        # instances it serves: every project's local fleet is an instance of the one local
        # agent, and a feed per instance read each page N times, writing its wakes N times.
        self._tasks: dict[str, asyncio.Task[None]] = {}  # feed key -> its task
        self._feed_clients: dict[str, AgentClient] = {}  # feed key -> the client it reads
        self._members: dict[str, list[str]] = {}  # feed key -> the instances it serves
        self._feed_of: dict[str, str] = {}  # instance -> its feed's key
        self._clients: dict[str, AgentClient] = {}  # instance -> the client it is read by
        self._joins: set[asyncio.Task[bool]] = set()  # wakes of instances joining a feed
        self._feeds = 0
        self.refollowed = 0
        """Feeds dropped for a moved agent and started again through its new client."""
        self._live: set[str] = set()
        self._ends: OrderedDict[tuple[str, str], JobEnd] = OrderedDict()
        self._starts: OrderedDict[tuple[str, str], str] = OrderedDict()  # `submitting`
        self._closed = False

    def follow(self, instance_id: str, client: AgentClient) -> None:
        """Follow the agent of `instance_id` through `client` (no-op if already followed
        through it, or closed). Another client means the agent moved (a local agent
        restarted on new ports, a host's address changed: `AgentDirectory` keeps one client
        per address): the old feed, which would poll the old address forever, is dropped
        and the agent followed anew (its first page wakes every job there)."""
        if self._closed or self._clients.get(instance_id) is client:
            return
        with contextlib.suppress(RuntimeError):  # no running loop (sync callers): skip
            loop = asyncio.get_running_loop()
            if self._leave(instance_id):
                self.refollowed += 1  # its jobs poll until the new feed reads
            self._clients[instance_id] = client
            shared = next((k for k, c in self._feed_clients.items() if c is client), None)
            if shared is not None:  # another instance of that agent: its feed serves both
                self._members[shared].append(instance_id)
                self._feed_of[instance_id] = shared
                if shared in self._live:  # news from before it joined: its jobs look
                    join = loop.create_task(self._wake_all_of([instance_id], client.name))
                    self._joins.add(join)
                    join.add_done_callback(self._joins.discard)
                return
            # the feed is named by its first instance (what a submit before it knew), unless
            # a feed of that name still serves other instances
            self._feeds += 1
            key = instance_id if instance_id not in self._tasks else f"{instance_id}#{self._feeds}"
            self._feed_clients[key], self._members[key] = client, [instance_id]
            self._feed_of[instance_id] = key
            self._tasks[key] = loop.create_task(
                self._follow(key, client), name=f"job-events-{instance_id}"
            )

    def _leave(self, instance_id: str) -> bool:
        """Drop the instance from its feed (the feed ends with its last instance)."""
        key = self._feed_of.pop(instance_id, None)
        self._clients.pop(instance_id, None)
        if key is None:
            return False
        members = self._members.get(key, [])
        if instance_id in members:
            members.remove(instance_id)
        if not members:
            task = self._tasks.pop(key, None)
            if task is not None:
                task.cancel()
            self._members.pop(key, None)
            self._feed_clients.pop(key, None)
            self._live.discard(key)
        return True

    def _key(self, instance_id: str) -> str:
        return self._feed_of.get(instance_id, instance_id)

    def following(self, instance_id: str) -> bool:
        """True while the instance's agent events are read (a job there may sleep long)."""
        return self._feed_of.get(instance_id) in self._live

    def ended(self, instance_id: str, agent_job_id: str) -> JobEnd | None:
        """The end the instance's agent announced for this job, taken (None: not known;
        ask the agent)."""
        return self._ends.pop((self._key(instance_id), agent_job_id), None)

    def holds_end(self, instance_id: str, agent_job_id: str) -> bool:
        """Whether the agent's end of this job is held here (not taken: `ended` takes it)."""
        return (self._key(instance_id), agent_job_id) in self._ends

    def _keep_ends(self, instance_id: str, page: JobEventsPage) -> None:
        for event in page.events:
            if event.end is not None:
                self._ends[(instance_id, event.job_id)] = event.end
        while len(self._ends) > KEEP_ENDS:
            self._ends.popitem(last=False)

    def open(self) -> None:
        """Follow again after `aclose` (a controller started again)."""
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        tasks = [*self._tasks.values(), *self._joins]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._joins.clear()
        self._clients.clear()
        self._feed_clients.clear()
        self._members.clear()
        self._feed_of.clear()
        self._live.clear()

    async def _follow(self, instance_id: str, client: AgentClient) -> None:
        since, epoch, failures = 0, "", 0
        unwoken = False  # the feed broke and its wake of the instance's jobs failed
        while True:
            if unwoken:
                unwoken = not await self._wake_all(instance_id, client.name)
            try:
                page = await client.job_events(since, epoch, wait=self._wait)
            except AgentUnreachable:
                unwoken = await self._lost(instance_id, client.name, failures, unwoken)
                failures += 1
                continue
            except AgentError as exc:
                if exc.code == ErrorCode.NOT_FOUND.value:  # an agent without events
                    log.info("%s: agent has no job events; its jobs are polled", client.name)
                    self._live.discard(instance_id)
                    return
                unwoken = await self._lost(instance_id, client.name, failures, unwoken)
                failures += 1
                continue
            except Exception:  # the outermost loop of one host: log, retry, go on
                log.exception("%s: reading job events failed", client.name)
                unwoken = await self._lost(instance_id, client.name, failures, unwoken)
                failures += 1
                continue
            failures = 0
            self._live.add(instance_id)
            self._keep_ends(instance_id, page)
            recorded = await self._record(instance_id, client.name, page)
            unwoken = (unwoken and not page.reset) or not recorded  # not: wake them all
            since, epoch = page.seq, page.epoch
            if page.events and self._gap > 0:
                await self._sleep(self._gap)  # let the next page gather (`PAGE_GAP`)

    async def _record(self, instance_id: str, name: str, page: JobEventsPage) -> bool:
        """Record what the page implies (starts, wakes), retrying while the store refuses
        it: the page is not passed over before (the next poll would never name those
        jobs again). False for another error: every job there must be woken instead."""
        started, ids = ([], []) if page.reset else self._news(instance_id, page)
        attempt = 0
        while True:
            try:
                if page.reset:
                    woken = 0
                    for member in list(self._members.get(instance_id, ())):
                        woken += await self._wakes.wake_jobs_on_instance(member)
                else:
                    await self._record_running(instance_id, started)
                    woken = await self._wakes.wake("jobs", ids) if ids else 0
                break
            except Exception as exc:  # a refused write: the same writes again (else logged)
                if not self._refused(exc):
                    log.exception("%s: recording job events failed; its jobs are woken", name)
                    return False
                delay = self._write_retry[min(attempt, len(self._write_retry) - 1)]
                log.warning(
                    "%s: recording job events failed (%s); again in %.2f s",
                    name,
                    _brief(exc),
                    delay,
                )
                attempt += 1
                await self._sleep(delay)
        if woken:
            self._hint("jobs")
        return True

    async def _wake_all(self, key: str, name: str) -> bool:
        """Wake every unfinished job on the feed's instances; whether the store took it."""
        return await self._wake_all_of(list(self._members.get(key, ())), name)

    async def _wake_all_of(self, instance_ids: Sequence[str], name: str) -> bool:
        woken = 0
        try:
            for instance_id in instance_ids:
                woken += await self._wakes.wake_jobs_on_instance(instance_id)
        except Exception as exc:  # noqa: BLE001 - kept pending by the caller: tried again
            log.warning("%s: waking its jobs failed (%s); tried again", name, _brief(exc))
            return False
        finally:
            if woken:
                self._hint("jobs")
        return True

    def submitting(self, instance_id: str, agent_job_id: str) -> None:
        """A pass is submitting the job: its answer says whether it started, so the job's
        `running` event is no news (neither recorded nor woken for; see `submitted`)."""
        self._starts[(self._key(instance_id), agent_job_id)] = _SUBMITTING
        while len(self._starts) > KEEP_ENDS:
            self._starts.popitem(last=False)

    def submitted(self, instance_id: str, agent_job_id: str, *, started: bool) -> bool:
        """The submit was answered (`started`: running or ended). True if a `running`
        event was passed over that the answer did not tell: look at the job again."""
        key = (self._key(instance_id), agent_job_id)
        mark = self._starts.pop(key, None)
        if started and mark == _SUBMITTING:  # its start event is still to come: no news
            self._starts[key] = _ANSWERED
        return not started and mark == _PASSED_OVER

    def _news(self, instance_id: str, page: JobEventsPage) -> tuple[list[str], list[str]]:
        """The jobs the page says started, and the jobs to wake: every job it names but
        those whose only news is a start their submit's answer tells (`submitting`)."""
        started: list[str] = []
        woken: dict[str, None] = {}
        for event in page.events:
            start = event.kind is JobEventKind.STATE and event.status == AgentStatus.RUNNING
            mark = self._starts.get((instance_id, event.job_id)) if start else None
            if mark is not None:  # its submit's answer tells it (or told it): no news
                if mark == _ANSWERED:
                    del self._starts[(instance_id, event.job_id)]
                else:
                    self._starts[(instance_id, event.job_id)] = _PASSED_OVER
                continue
            if start:
                started.append(event.job_id)
            woken[event.job_id] = None
        return started, list(woken)

    async def _record_running(self, instance_id: str, started: Sequence[str]) -> None:
        """Jobs the page says started: recorded `running` now (their runs hinted)."""
        if self._states is None or not started:
            return
        states = self._states
        members = tuple(self._members.get(instance_id, ())) or (instance_id,)
        recorded = await asyncio.to_thread(states.record_agent_running, members, started)
        if recorded:
            self._hint("runs")

    async def _lost(self, instance_id: str, name: str, failures: int, unwoken: bool) -> bool:
        """The feed broke: the jobs there poll for themselves until it is back (each woken
        once now). Returns whether that wake is still owed (the store refused it)."""
        if instance_id in self._live:
            self._live.discard(instance_id)
            unwoken = True
        if unwoken:
            unwoken = not await self._wake_all(instance_id, name)
        await asyncio.sleep(self._retry[min(failures, len(self._retry) - 1)])
        return unwoken


def _always(exc: BaseException) -> bool:
    return True


def _brief(exc: BaseException) -> str:
    """An error's first line (a database error's text goes on with its SQL)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
