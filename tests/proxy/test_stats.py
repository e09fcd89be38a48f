"""Request rates of the service proxy on an injected clock."""

from __future__ import annotations

from reconciler.web.proxy_stats import RequestStats


def test_rate_over_window_and_horizon() -> None:
    now = [1000.0]
    stats = RequestStats(horizon=120, clock=lambda: now[0])
    for _ in range(60):
        stats.record("main", "web")
        now[0] += 0.5
    # 60 requests in the last 30 s
    assert stats.rps("main", "web", window=30) == 2.0
    assert stats.rps("main", "web", window=60) == 1.0
    now[0] += 200  # past the horizon: forgotten
    assert stats.rps("main", "web", window=60) == 0.0
    assert stats.rps("main", "other", window=60) == 0.0
