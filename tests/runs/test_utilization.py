"""utilization_policy decisions and the cron schedule of runs."""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.core.utilization import keep_window, violates
from reconciler.engine.workers.runs import next_cron_fire

POLICY = {"min_gpu_utilization": 10, "time_window": 600}


def test_idle_gpus_for_a_whole_window_violate() -> None:
    samples = [(t, (2.0, 3.0)) for t in range(0, 700, 60)]
    assert violates(POLICY, samples, now=660)


def test_one_busy_sample_or_short_history_does_not() -> None:
    busy = [(t, (2.0, 50.0 if t == 300 else 1.0)) for t in range(0, 700, 60)]
    assert not violates(POLICY, busy, now=660)
    short = [(t, (0.0,)) for t in range(400, 700, 60)]
    assert not violates(POLICY, short, now=660)
    assert not violates(None, short, now=660)
    no_gpus = [(t, ()) for t in range(0, 700, 60)]
    assert not violates(POLICY, no_gpus, now=660)


def test_keep_window_keeps_the_edge() -> None:
    samples = [(float(t), (1.0,)) for t in range(0, 1000, 100)]
    kept = keep_window(samples, now=950, window=300)
    assert kept[0][0] == 600
    assert kept[-1][0] == 900


def test_cron_next_fire_is_utc_and_earliest() -> None:
    now = datetime(2026, 11, 30, 7, 20, tzinfo=UTC).timestamp()
    fire = next_cron_fire({"schedule": {"cron": ["0 8 * * *", "30 7 * * *"]}}, now)
    assert fire == datetime(2026, 11, 30, 7, 30, tzinfo=UTC).timestamp()
    assert next_cron_fire({"schedule": {"cron": "0 0 * * *"}}, now) == (
        datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    )
    assert next_cron_fire({}, now) is None
