"""Removing finished jobs from their hosts, many per agent call.

`RunningJobs.remove` hands each finished job (its final status already stored) to
`JobRemovals.remove`. The first removal for a host goes at once; those that come while a
call to that host is in flight wait and go together in the next call
(``POST /jobs/removals``, `AgentClient.remove_many`), so a burst of ending jobs costs a
few calls instead of one each. Every caller returns once the call that carried its job
answered (or raises what that call raised). Not removing is harmless: the host keeps a
finished job's files, nothing depends on them.
"""

from __future__ import annotations

import asyncio

from agent.client import AgentClient
from agent.protocol import MAX_REMOVALS


class JobRemovals:
    """See the module docstring; one per jobs worker, on its event loop."""

    def __init__(self) -> None:
        self._waiting: dict[AgentClient, dict[str, asyncio.Future[None]]] = {}
        self._senders: dict[AgentClient, asyncio.Task[None]] = {}

    async def remove(self, client: AgentClient, job_id: str) -> None:
        """Remove `job_id` (finished) from the agent of `client`, with others due there."""
        waiting = self._waiting.setdefault(client, {})
        done = waiting.get(job_id)
        if done is None:
            done = waiting[job_id] = asyncio.get_running_loop().create_future()
        if client not in self._senders:  # a task of its own: a cancelled caller stops no one
            sender = asyncio.create_task(self._send(client), name="job-removals")
            self._senders[client] = sender
        await done

    async def _send(self, client: AgentClient) -> None:
        """Send what waits for `client` until nothing does (one call at a time)."""
        waiting: dict[str, asyncio.Future[None]] = {}
        try:
            while waiting := self._waiting.pop(client, {}):
                ids = list(waiting)
                for start in range(0, len(ids), MAX_REMOVALS):
                    part = ids[start : start + MAX_REMOVALS]
                    error: Exception | None = None
                    try:
                        await client.remove_many(part)
                    except Exception as exc:  # noqa: BLE001 - each caller raises its call's failure
                        error = exc
                    for job_id in part:
                        _settle(waiting[job_id], error)
        finally:  # cancelled (shutdown): whoever still waits is cancelled too
            self._senders.pop(client, None)  # now: a removal from here on starts a sender
            left = [*waiting.values(), *self._waiting.pop(client, {}).values()]
            for future in left:
                future.cancel()

    async def aclose(self) -> None:
        """Stop sending (at shutdown); jobs not yet removed stay on their hosts."""
        senders = list(self._senders.values())
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)


def _settle(future: asyncio.Future[None], error: Exception | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
