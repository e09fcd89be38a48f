"""Request rates of the service proxy on an injected clock."""

from __future__ import annotations

from reconciler.engine.service_stats import RequestStats


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


def test_observed_requests_are_totalled_and_exported() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from reconciler.web.metrics import ServiceCollector

    stats = RequestStats()
    stats.observe("main", "llm", 200, 0.25)
    stats.observe("main", "llm", 201, 0.75)
    stats.observe("main", "llm", 502, 0.5)
    stats.observe("main", "llm", 0, 1.0)  # the client went away
    assert stats.totals() == {
        ("main", "llm", "2xx"): (2, 1.0),
        ("main", "llm", "5xx"): (1, 0.5),
        ("main", "llm", "aborted"): (1, 1.0),
    }
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(stats.totals))
    text = generate_latest(registry).decode()
    assert 'dockyard_service_requests_total{code="2xx",project="main",run="llm"} 2.0' in text
    assert (
        'dockyard_service_request_duration_seconds_sum{code="2xx",project="main",run="llm"} 1.0'
        in text
    )
