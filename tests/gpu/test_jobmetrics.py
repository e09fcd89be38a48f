"""dstack's JobMetrics from agent samples (pure), validated against dstack 0.22.5's model."""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.core.jobmetrics import dstack_job_metrics
from reconciler.domain.metrics import GpuSample, JobSample
from tests.services.missing import need_module

GIB = 2**30


def test_names_values_and_order_are_dstacks() -> None:
    later = JobSample(20.0, 150.4, 3 * GIB, (GpuSample(97.0, 20 * GIB),))
    earlier = JobSample(10.0, 50.0, 2 * GIB, (GpuSample(3.2, 1 * GIB),))
    answer = dstack_job_metrics([later, earlier])
    values = {m["name"]: m["values"] for m in answer["metrics"]}
    assert values == {
        "cpu_usage_percent": [50, 150],
        "memory_usage_bytes": [2 * GIB, 3 * GIB],
        "memory_working_set_bytes": [2 * GIB, 3 * GIB],
        "gpus_detected_num": [1, 1],
        "gpu_memory_usage_bytes_gpu0": [1 * GIB, 20 * GIB],
        "gpu_util_percent_gpu0": [3, 97],
    }
    stamps = answer["metrics"][0]["timestamps"]
    assert stamps == [datetime.fromtimestamp(t, UTC).isoformat() for t in (10.0, 20.0)]


def test_gpu_metrics_left_out_when_the_count_changes() -> None:
    one = JobSample(1.0, 0.0, 0, (GpuSample(1.0, 1),))
    none = JobSample(2.0, 0.0, 0)
    names = [m["name"] for m in dstack_job_metrics([one, none])["metrics"]]
    assert names == ["cpu_usage_percent", "memory_usage_bytes", "memory_working_set_bytes"]


def test_no_samples_no_metrics() -> None:
    assert dstack_job_metrics([]) == {"metrics": []}


def test_validates_against_dstacks_model() -> None:
    models = need_module(
        "dstack._internal.core.models.metrics",
        "pip install -e '.[dev]' (scripts/setup.sh --dev installs it)",
    )
    sample = JobSample(5.0, 12.0, GIB, (GpuSample(60.0, GIB), GpuSample(0.0, 0)))
    parsed = models.JobMetrics.model_validate(dstack_job_metrics([sample]))
    assert [m.name for m in parsed.metrics][-2:] == [
        "gpu_util_percent_gpu0",
        "gpu_util_percent_gpu1",
    ]
