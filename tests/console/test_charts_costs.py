"""The console's pictures and cost figures (pure)."""

from __future__ import annotations

import re

from reconciler.domain.metrics import GpuSample, JobSample
from reconciler.web.console.capacitypages import with_idle_gpus
from reconciler.web.console.charts import Series, line_chart, round_up
from reconciler.web.console.costs import Spend, cost_between, hourly_rates, rate_at
from reconciler.web.console.samples import combined


def test_a_chart_has_axes_units_and_escaped_text() -> None:
    svg = line_chart("GPU <memory>", "bytes", [Series("gpu0&", [(0.0, 2**30), (60.0, 3 * 2**30)])])
    assert "GPU &lt;memory&gt;" in svg and "gpu0&amp;" in svg
    assert "4 GiB" in svg and "0 B" in svg  # the y axis up to a round maximum, with the unit
    assert "-1 min" in svg and "now" in svg
    assert len(re.findall(r"<polyline", svg)) == 1


def test_percent_charts_end_at_100_and_empty_charts_say_so() -> None:
    svg = line_chart("GPU utilization", "%", [Series("gpu0", [(0, 50.0), (5, 97.0)])], y_max=100)
    assert "100%" in svg
    assert "no samples yet" in line_chart("CPU", "%", [Series("cpu", [])])


def test_round_up() -> None:
    assert [round_up(v) for v in (0, 0.3, 1, 1.5, 3, 7, 42)] == [1, 0.5, 1, 2, 5, 10, 50]


def test_costs_now_over_a_window_and_per_hour() -> None:
    hour = 3600.0
    spends = [Spend(4.0, 0.0, 2 * hour), Spend(2.0, hour, None)]
    assert rate_at(spends, 1.5 * hour) == 6.0
    assert rate_at(spends, 3 * hour) == 2.0
    assert cost_between(spends, 0.0, 3 * hour) == 4.0 * 2 + 2.0 * 2
    assert hourly_rates(spends, 3 * hour, 3) == [
        (0.0, 4.0),
        (hour, 6.0),
        (2 * hour, 2.0),
        (3 * hour, 2.0),
    ]


def test_an_instances_usage_adds_its_jobs_up_and_shows_every_gpu() -> None:
    one = JobSample(5.0, 50.0, 2**30, (GpuSample(90.0, 2**30, host_index=1),))
    two = JobSample(5.0, 25.0, 2**29, (GpuSample(10.0, 2**29, host_index=3),))
    total = with_idle_gpus(combined([one, two], at=6.0), 4)
    assert (total.timestamp, total.cpu_percent, total.memory_bytes) == (6.0, 75.0, 3 * 2**29)
    assert [(g.host_index, g.utilization_percent) for g in total.gpus] == [
        (0, 0.0),
        (1, 90.0),
        (2, 0.0),
        (3, 10.0),
    ]
