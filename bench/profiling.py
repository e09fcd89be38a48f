"""Where the in-process server's CPU goes, for `bench/reconcile.py --profile FILE`.

py-spy is not installed everywhere and one cProfile sees one thread, while the server's
work is spread over its event loop (the main thread), its store's lane (`lanes.Lane`: one
thread on SQLite) and the default executor. So this gives (1) each thread's CPU seconds
over the window, from /proc, summed by thread name, and (2) a cProfile (in thread CPU
time) of the event loop's thread and one of the store lane (every unit of work run through
`Lane.run` is run under it, on the lane's own thread) and of `asyncio.to_thread`'s calls
(the default executor), as pstats text sorted by cumulative
time. The profiles roughly double the CPU they measure: read their shares, not figures.
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import io
import os
import pstats
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reconciler.adapters.db.lanes import Lane


def thread_cpu() -> dict[str, float]:
    """CPU seconds (utime + stime, /proc) of this process's threads so far, summed by
    thread name without its number (a pool's threads share their prefix)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(task.name), f"native-{task.name}").rstrip("0123456789_")
        found[name] = found.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return found


def _stats(profile: cProfile.Profile | pstats.Stats, top: int) -> str:
    out = io.StringIO()
    stats = profile if isinstance(profile, pstats.Stats) else pstats.Stats(profile)
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


@contextmanager
def profiled(path: Path, *, top: int = 80) -> Iterator[None]:
    """Profile the block (see the module docstring); the report is written to `path`."""
    # CPU time of the profiled thread, not wall time: waits (the GIL, SQLite's lock,
    # the network) are not the server's cost
    loop_profile = cProfile.Profile(time.thread_time_ns, 1e-9)
    lane_profile = cProfile.Profile(time.thread_time_ns, 1e-9)
    original = Lane.run

    async def run(self: Lane, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(fn, *args, **kwargs)
        return await original(self, lane_profile.runcall, call)

    pool_profiles: dict[int, cProfile.Profile] = {}  # one per thread of the default executor
    to_thread = asyncio.to_thread

    def pool_call(call: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        profile = pool_profiles.setdefault(
            threading.get_ident(), cProfile.Profile(time.thread_time_ns, 1e-9)
        )
        return profile.runcall(call, *args, **kwargs)

    async def pooled(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return await to_thread(pool_call, fn, *args, **kwargs)

    before = thread_cpu()
    Lane.run = run  # type: ignore[method-assign]
    asyncio.to_thread = pooled
    loop_profile.enable()
    try:
        yield
    finally:
        loop_profile.disable()
        Lane.run = original  # type: ignore[method-assign]
        asyncio.to_thread = to_thread
        after = thread_cpu()
        cpu = {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}
        text = [f"thread CPU seconds over the window: {cpu}", "", "== event loop (main thread)"]
        text += [_stats(loop_profile, top), "== store lane", _stats(lane_profile, top)]
        if pool_profiles:
            first, *others = pool_profiles.values()
            merged = pstats.Stats(first)
            for other in others:
                merged.add(other)
            text += ["== default executor (asyncio.to_thread)", _stats(merged, top)]
        path.write_text("\n".join(text))
