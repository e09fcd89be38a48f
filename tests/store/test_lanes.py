"""The store's lane (`adapters/db/lanes.py`): the workers' hot units of work run off the
event loop in few threads, one on SQLite (one writer: more threads only fought over the
GIL and the write lock), a few on a networked database."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from reconciler.adapters.db.lanes import OTHER_THREADS, Lane, lane_for
from reconciler.adapters.db.store import Store


async def test_sqlite_work_runs_in_one_lane_thread_off_the_loop(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path}/lane.db", migrate=True)
    loop_thread = threading.get_ident()
    seen: set[tuple[int, str]] = set()

    def unit(index: int) -> int:
        seen.add((threading.get_ident(), threading.current_thread().name))
        store.get_or_create_project(f"p{index % 3}")  # a real unit of work
        return index

    try:
        assert await asyncio.gather(*(store.in_lane(unit, i) for i in range(20))) == list(range(20))
        ((ident, name),) = seen  # every call in the same one thread
        assert ident != loop_thread and name.startswith("store-lane")
    finally:
        store.close()


async def test_a_networked_database_gets_a_few_threads_and_close_lets_them_go() -> None:
    lane = lane_for("postgresql")
    started, release = threading.Barrier(OTHER_THREADS + 1), threading.Event()

    def hold() -> str:
        started.wait(timeout=30)  # all of them at once: as many threads as the lane has
        release.wait(timeout=30)
        return threading.current_thread().name

    calls = [asyncio.ensure_future(lane.run(hold)) for _ in range(OTHER_THREADS)]
    await asyncio.to_thread(started.wait, 30)
    release.set()
    assert len(set(await asyncio.gather(*calls))) == OTHER_THREADS
    lane.close()
    assert await Lane(1).run(lambda: 7) == 7  # made again on first use
