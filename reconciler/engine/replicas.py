"""This server's entry among the replicas of its database: join at start, beat, leave at stop.

`ReplicaHeartbeat.start()` registers the server (refusing, with the other replicas named,
when a live one runs another version: `adapters.db.replicas`), then stamps its heartbeat
every `HEARTBEAT_EVERY` seconds until `stop()`, which removes the entry so a server of a new
version may start at once. Started and stopped by the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from reconciler.adapters.db.refusals import refused_by_store
from reconciler.adapters.db.replicas import HEARTBEAT_EVERY, ReplicaIdentity, ReplicaStore
from reconciler.adapters.db.store import Store

log = logging.getLogger(__name__)


class ReplicaHeartbeat:
    """See the module docstring."""

    def __init__(self, store: Store, me: ReplicaIdentity, every: float = HEARTBEAT_EVERY) -> None:
        self.replicas = ReplicaStore(store.engine, clock=store.clock)
        self.me = me
        self.every = every
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await asyncio.to_thread(self.replicas.join, self.me)
        self._stop.clear()
        self._task = asyncio.create_task(self._beat(), name="replica-heartbeat")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            await asyncio.to_thread(self.replicas.leave, self.me)

    async def _beat(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.every)
            if self._stop.is_set():
                return
            try:
                if not await asyncio.to_thread(self.replicas.beat, self.me):
                    await asyncio.to_thread(self.replicas.join, self.me)
            except Exception as exc:  # the outermost loop of the heartbeat: log, beat again later
                if refused_by_store(exc):  # a full disk, a lost connection: one line, no traceback
                    log.warning("replica heartbeat failed (%s)", _brief(exc))
                else:
                    log.exception("replica heartbeat failed")


def _brief(exc: BaseException) -> str:
    """An error's first line (a database error's text goes on with its SQL)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
