"""Calls to an agent gathered into one: many jobs' submits, many jobs' removals.

The first request for a host goes once `gather` returns (at once without one); those that
come meanwhile, or while a call to that host is in flight, wait and go together in the
next call (up to `most` per call), so a burst of jobs costs a few calls instead of one
each. `gather` is what a use waits for to let a burst come together: removals a fixed
short time (nothing waits on them), submits until the jobs being placed now are placed
(`JobPlacer.settled`), so a claimed batch's jobs go in one call. Each caller returns once
the call that carried its request answered, with its own answer (or raises its own
refusal, or what the whole call raised). A request for a key already waiting shares its answer.

`JobRemovals` (``POST /jobs/removals``) and `JobSubmits` (``POST /jobs/submissions``)
are the two uses; the jobs worker holds one of each, on its event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from agent.client import AgentClient
from agent.protocol import MAX_REMOVALS, MAX_SUBMISSIONS, JobSpec, JobState

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")
Send = Callable[[AgentClient, list[ItemT]], Awaitable[Sequence[ResultT | Exception]]]
Gather = Callable[[], Awaitable[object]]
REMOVAL_GATHER = 0.25
"""Seconds a removal waits for others to the same host: a finished job's files may stay a
moment longer (nothing depends on them), and a burst of ends costs one call."""


class AgentBatches(Generic[ItemT, ResultT]):
    """See the module docstring."""

    def __init__(
        self, send: Send[ItemT, ResultT], *, most: int, name: str, gather: Gather | None = None
    ) -> None:
        self._send_part = send
        self._gather = gather
        self._most = most
        self._name = name
        self._waiting: dict[AgentClient, dict[str, tuple[ItemT, asyncio.Future[ResultT]]]] = {}
        self._senders: dict[AgentClient, asyncio.Task[None]] = {}

    async def call(self, client: AgentClient, key: str, item: ItemT) -> ResultT:
        """`item`'s answer from the agent of `client`, sent with the others due there."""
        waiting = self._waiting.setdefault(client, {})
        entry = waiting.get(key)
        if entry is None:
            entry = waiting[key] = (item, asyncio.get_running_loop().create_future())
        if client not in self._senders:  # a task of its own: a cancelled caller stops no one
            self._senders[client] = asyncio.create_task(self._send(client), name=self._name)
        return await entry[1]

    async def _send(self, client: AgentClient) -> None:
        """Send what waits for `client` until nothing does (one call at a time)."""
        waiting: dict[str, tuple[ItemT, asyncio.Future[ResultT]]] = {}
        try:
            while True:
                if self._gather is not None:
                    await self._gather()
                waiting = self._waiting.pop(client, {})
                if not waiting:
                    break
                entries = list(waiting.values())
                for start in range(0, len(entries), self._most):
                    await self._send_one(client, entries[start : start + self._most])
        finally:  # cancelled (shutdown): whoever still waits is cancelled too
            self._senders.pop(client, None)  # now: a request from here on starts a sender
            left = [*waiting.values(), *self._waiting.pop(client, {}).values()]
            for _, future in left:
                future.cancel()

    async def _send_one(
        self, client: AgentClient, part: list[tuple[ItemT, asyncio.Future[ResultT]]]
    ) -> None:
        try:
            answers: Sequence[ResultT | Exception] = await self._send_part(
                client, [item for item, _ in part]
            )
        except Exception as exc:  # noqa: BLE001 - each caller raises its call's failure
            answers = [exc] * len(part)
        for (_, future), answer in zip(part, answers, strict=True):
            if future.done():
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    async def aclose(self) -> None:
        """Stop sending (at shutdown); what was not sent is not (its callers are cancelled)."""
        senders = list(self._senders.values())
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)


class JobRemovals(AgentBatches[str, None]):
    """Removing finished jobs from their hosts (their final status already stored), many
    per ``POST /jobs/removals``, gathered `gather` seconds. Not removing is harmless: the
    host keeps a finished job's files, nothing depends on them."""

    def __init__(self, gather: float = REMOVAL_GATHER) -> None:
        super().__init__(_remove, most=MAX_REMOVALS, name="job-removals", gather=_pause(gather))

    async def remove(self, client: AgentClient, job_id: str) -> None:
        await self.call(client, job_id, job_id)


class JobSubmits(AgentBatches[JobSpec, JobState]):
    """Submitting placed jobs to their hosts, many per ``POST /jobs/submissions``; each
    caller gets its job's state, or the `AgentError` ``POST /jobs`` would have raised.
    `gather`: what a submit waits for before its call goes (the placements under way)."""

    def __init__(self, gather: Gather | None = None) -> None:
        super().__init__(_submit, most=MAX_SUBMISSIONS, name="job-submits", gather=gather)

    async def submit(self, client: AgentClient, spec: JobSpec) -> JobState:
        return await self.call(client, spec.id, spec)


def _pause(seconds: float) -> Gather | None:
    if seconds <= 0:
        return None

    async def pause() -> None:
        await asyncio.sleep(seconds)

    return pause


async def _remove(client: AgentClient, job_ids: list[str]) -> list[None]:
    await client.remove_many(job_ids)
    return [None] * len(job_ids)


async def _submit(client: AgentClient, specs: list[JobSpec]) -> Sequence[JobState | Exception]:
    return await client.submit_many(specs)
