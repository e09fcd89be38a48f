"""One read of /proc at a time, shared by every caller that asked while it waited.

Killing a job means reading the whole process table (its escaped children are found by
their marker), and reading it takes long on a host with thousands of processes (about a
second for 3,000 on a loaded 2-core VM). A thousand jobs stopped at once each asking for
their own read kept the agent's threads busy for minutes and its API silent (the local
agent was then replaced mid-stop). ``SharedScans.fresh`` gives each caller the first
read that *starts after* it asked (so a kill is always checked against a later table),
one read at a time, and every caller waiting for the next read shares it. Used by
``ProcessExecutor``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agent.server.executors import proctable


class SharedScans:
    def __init__(self, scan: Callable[[], proctable.ProcTable] = proctable.snapshot) -> None:
        self._scan = scan
        self._next: asyncio.Future[proctable.ProcTable] | None = None  # not started yet
        self._one_at_a_time = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.reads = 0  # how many reads were made (for tests and figures)

    async def fresh(self) -> proctable.ProcTable:
        """The process table as read after this call (an OSError of the read is raised)."""
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._read(self._next))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(self._next)

    async def _read(self, future: asyncio.Future[proctable.ProcTable]) -> None:
        async with self._one_at_a_time:
            self._next = None  # who asks from now on waits for the read after this one
            self.reads += 1
            try:
                table = await asyncio.to_thread(self._scan)
            except OSError as error:
                future.set_exception(error)
                future.exception()  # retrieved: no warning when no caller is left
            else:
                future.set_result(table)
