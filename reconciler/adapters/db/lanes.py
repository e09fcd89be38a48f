"""The store's lane: the few threads the workers' hot units of work run in.

The store is synchronous; the workers run its units of work off the event loop. With
`asyncio.to_thread` every claim, batch read and step write of a burst went to the loop's
default executor (as many threads as CPUs plus four), and those threads then fought over
the GIL and SQLite's one write lock: measured on 2 cores with 500 tiny tasks, the server
spent 22.7 / 26.8 ms of CPU per task with six such threads against 16.6 / 17.9 with one,
and ran 37 / 31 against 46 / 41 tasks a second (`bench/reconcile.py`, alternating).
SQLite has one writer anyway, so its lane is one thread; PostgreSQL's waits are on the
network, so its lane has a few. Slow work that is not the store's (git fetches, Pulumi,
SSH deploys) stays on the default executor: it never holds the lane.

Callers: the jobs and runs workers, their leasing (`workleasing.StoreLeasing`) and the job
events follower, through `StoreBase.in_lane`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

SQLITE_THREADS = 1
OTHER_THREADS = 4


class Lane:
    """A small thread pool, made on first use and shut down by `close`."""

    def __init__(self, threads: int, *, name: str = "store-lane") -> None:
        self._threads = threads
        self._name = name
        self._pool: ThreadPoolExecutor | None = None

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` in one of the lane's threads."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        """Let the threads go once what runs there is done (nothing new is taken)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def lane_for(dialect: str) -> Lane:
    """One thread for SQLite (one writer at a time), a few for a networked database."""
    return Lane(SQLITE_THREADS if dialect == "sqlite" else OTHER_THREADS)
