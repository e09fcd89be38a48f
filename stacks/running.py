"""Running blocking stack operations: one at a time per stack, a few at a time overall.

Both engines do blocking work (file system, the Pulumi CLI). `StackRunner.run` takes the
stack's in-process lock without waiting (a held lock raises `StackBusy` at once, so a
worker never hangs behind a 10-minute update), runs the work in a bounded thread pool
(the parallelism limit), and on cancellation of the awaiting task either drops work
that has not started or calls `on_cancel` (e.g. interrupt the Pulumi CLI) and leaves
the lock to the thread, which releases it when the work really ends.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from stacks.protocol import StackBusy

T = TypeVar("T")


class StackRunner:
    """Per-stack non-blocking locks plus a thread pool of `max_parallel` workers."""

    def __init__(self, *, max_parallel: int = 4, thread_name: str = "stack") -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix=thread_name)
        self._locks: dict[str, threading.Lock] = {}
        self._running: dict[str, Future[Any]] = {}
        self._guard = threading.Lock()
        self.max_parallel = max_parallel

    def _lock(self, stack: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(stack, threading.Lock())

    async def run(
        self,
        stack: str,
        work: Callable[[], T],
        *,
        on_cancel: Callable[[], None] | None = None,
    ) -> T:
        """Run `work` for `stack` in the pool; `StackBusy` if the stack is already in use."""
        lock = self._lock(stack)
        if not lock.acquire(blocking=False):
            raise StackBusy(f"stack {stack} is busy with another operation; retry later")

        def guarded() -> T:
            try:
                return work()
            finally:
                lock.release()

        future = self._pool.submit(guarded)
        with self._guard:
            self._running[stack] = future
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if future.cancel():
                lock.release()
            elif on_cancel is not None:
                on_cancel()
            raise

    async def wait_idle(self, stack: str) -> None:
        """Wait until the last operation started for `stack` has really ended (even if the
        task awaiting it was cancelled); its outcome is not reported here."""
        with self._guard:
            future = self._running.get(stack)
        if future is not None:
            await asyncio.wait([asyncio.wrap_future(future)])

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
