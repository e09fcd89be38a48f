"""Request counters of the service proxy, read by the autoscaler and by `/metrics`.

The proxy records one timestamp per request and service; the runs worker asks for the
rate over the service's scaling window. When a request ends the proxy also `observe`s its
status and duration: running totals per service and status class (`2xx`…`5xx`) that
`reconciler.web.metrics` exports as `dockyard_service_requests_total` and
`dockyard_service_request_duration_seconds`. Both read the same clock (the one given here),
so the rate never mixes wall time with monotonic time. Kept in memory per server
process: with several server replicas each one scales on the traffic it sees
(documented in docs/reconcile.md).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class RequestStats:
    """Per-service request timestamps over the last `horizon` seconds."""

    def __init__(
        self, *, horizon: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._horizon = horizon
        self._clock = clock
        self._seen: dict[tuple[str, str], deque[float]] = {}
        self._totals: dict[tuple[str, str, str], list[float]] = {}  # [count, seconds]

    def record(self, project: str, run_name: str) -> None:
        now = self._clock()
        times = self._seen.setdefault((project, run_name), deque())
        times.append(now)
        self._trim(times, now)

    def observe(self, project: str, run_name: str, status: int, seconds: float) -> None:
        """One finished request: its status (0: the client went away) and duration."""
        code = f"{status // 100}xx" if status else "aborted"
        total = self._totals.setdefault((project, run_name, code), [0, 0.0])
        total[0] += 1
        total[1] += seconds

    def totals(self) -> dict[tuple[str, str, str], tuple[int, float]]:
        """(project, run, status class) → (requests, seconds), since the process started."""
        return {key: (int(count), seconds) for key, (count, seconds) in self._totals.items()}

    def rps(self, project: str, run_name: str, *, window: float) -> float:
        """Requests per second over the last `window` seconds."""
        times = self._seen.get((project, run_name))
        if not times or window <= 0:
            return 0.0
        now = self._clock()
        self._trim(times, now)
        since = now - window
        return sum(1 for t in times if t >= since) / window

    def _trim(self, times: deque[float], now: float) -> None:
        limit = now - self._horizon
        while times and times[0] < limit:
            times.popleft()
