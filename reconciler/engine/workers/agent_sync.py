"""Settling an agent with the store: what each side says about the jobs of one host.

Called by the instances worker on every healthcheck its agent answers (`AgentSync.settle`).
The agent's job list is compared with the store when this server process first reaches the
agent, when the agent is another process than last time (it restarted: the `epoch` of its
healthcheck changed), when it answers again after being unreachable, after the store
ended jobs there without it, and after a finished job's removal did not reach it (the jobs
worker marks it `unsettled`); otherwise nothing is asked (one cheap store read at most):

- every job the store has active there is made due now: its own pass (`job_running`) asks
  the agent, so a stop still pending reaches the job's processes as soon as the agent is
  back, an end the agent recorded while the server did not hear is recorded, and a job the
  agent does not know ends by dstack's rule (`executor_error`, the agent lost it: a task
  fails, a service's replica is replaced by the runs worker);
- the agent's unfinished jobs the store has ended are stopped (forced): a job the store
  records ended keeps no process once its agent answers;
- the agent's finished jobs the store has ended are removed (record, log and work dir): a
  removal that a kill interrupted (the server's, between a job's final write and its
  removal; the agent's, in the middle of one), or that found the agent away, is done
  here, from the store's word.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from agent.client import AgentClient
from agent.protocol import MAX_REMOVALS
from reconciler.adapters.db.store import Store
from reconciler.domain.inventory import InstanceRecord


@dataclass(frozen=True, slots=True)
class Settled:
    """What one settling did (for the instance's events)."""

    woken: int = 0  # active jobs made due
    stopped: int = 0  # ended in the store, still running there: stopped
    removed: int = 0  # ended in the store, finished there: removed


@dataclass
class AgentSync:
    """See the module docstring; one per instances worker (state: per server process)."""

    store: Store
    now: Callable[[], datetime]
    unsettled: set[str] = field(default_factory=set)  # missed a removal (`AgentDirectory`)
    _epochs: dict[str, str] = field(default_factory=dict)  # instance -> agent epoch seen
    _swept: dict[str, datetime] = field(default_factory=dict)  # instance -> last settling

    def due(self, row: InstanceRecord, epoch: str) -> bool:
        """Whether the agent must be compared with the store now (no I/O but a store read
        when nothing else says so)."""
        if self._epochs.get(row.id) != epoch or row.unreachable_since is not None:
            return True
        if row.id in self.unsettled:
            return True
        since = self._swept.get(row.id)
        return since is None or self.store.lost_since(row.id, since)

    async def settle(self, row: InstanceRecord, client: AgentClient, epoch: str) -> Settled:
        """Compare the agent's jobs with the store's when `due` (see the module docstring)."""
        if not await asyncio.to_thread(self.due, row, epoch):
            return Settled()
        now = self.now()
        self.unsettled.discard(row.id)  # a removal missed before this look is done by it
        restarted = self._epochs.get(row.id, epoch) != epoch or row.unreachable_since is not None
        first = row.id not in self._epochs
        states = await client.jobs()
        running = [s.id for s in states if not s.status.is_finished()]
        finished = [s.id for s in states if s.status.is_finished()]
        store = self.store
        ended_running = await asyncio.to_thread(store.ended_on_instance, row.id, running)
        for job_id in ended_running:
            await client.stop(job_id, grace=0, force=True)
        ended_finished = await asyncio.to_thread(store.ended_on_instance, row.id, finished)
        removed = await _remove(client, ended_finished)
        woken = 0
        if first or restarted:
            woken = await asyncio.to_thread(store.wake_active_on_instance, row.id)
        self._epochs[row.id], self._swept[row.id] = epoch, now
        return Settled(woken=woken, stopped=len(ended_running), removed=removed)


async def _remove(client: AgentClient, job_ids: Sequence[str]) -> int:
    removed = 0
    for start in range(0, len(job_ids), MAX_REMOVALS):
        answer = await client.remove_many(job_ids[start : start + MAX_REMOVALS])
        removed += len(answer.removed)
    return removed
