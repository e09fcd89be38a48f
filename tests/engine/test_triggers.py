"""The apscheduler timers: the periodic fetch per project and the retry of the branch head."""

from __future__ import annotations

import asyncio

from reconciler.engine.triggers import Timers


async def test_the_periodic_fetch_and_a_retry_queue_reconciles_of_the_project() -> None:
    calls: asyncio.Queue[str] = asyncio.Queue()

    async def request(project: str) -> None:
        await calls.put(project)

    timers = Timers(request, fetch_interval=0.05)
    timers.retry_later("main", 0.0)  # not running yet: ignored
    timers.start({"main"})
    try:
        assert await asyncio.wait_for(calls.get(), 5) == "main"
        assert await asyncio.wait_for(calls.get(), 5) == "main"
        timers.retry_later("other", 0.0)
        seen = {await asyncio.wait_for(calls.get(), 5) for _ in range(3)}
        assert "other" in seen
    finally:
        timers.stop()


async def test_the_interval_can_be_changed_while_running() -> None:
    calls: asyncio.Queue[str] = asyncio.Queue()

    async def request(project: str) -> None:
        await calls.put(project)

    timers = Timers(request, fetch_interval=3600)
    assert not timers.set_interval("main", 0.05)  # not running yet
    timers.start({"main"})
    try:
        assert not timers.set_interval("main", 3600)  # unchanged
        assert timers.set_interval("main", 0.05)
        assert await asyncio.wait_for(calls.get(), 5) == "main"
    finally:
        timers.stop()
