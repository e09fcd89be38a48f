"""dstack's `JobMetrics` answer from a job's samples (pure): what `metrics/job/{run}` returns.

Names are dstack's: `cpu_usage_percent`, `memory_usage_bytes`, `memory_working_set_bytes`,
`gpus_detected_num`, `gpu_memory_usage_bytes_gpu{i}`, `gpu_util_percent_gpu{i}`; each metric
lists the samples' timestamps (ISO 8601, UTC) and values, oldest first. GPU metrics are left
out when the samples disagree on the number of GPUs, as dstack does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from reconciler.domain.metrics import JobSample


def dstack_job_metrics(samples: Sequence[JobSample]) -> dict[str, Any]:
    ordered = sorted(samples, key=lambda sample: sample.timestamp)
    stamps = [datetime.fromtimestamp(s.timestamp, UTC).isoformat() for s in ordered]

    def metric(name: str, values: list[Any]) -> dict[str, Any]:
        return {"name": name, "timestamps": stamps, "values": values}

    metrics = [
        metric("cpu_usage_percent", [round(s.cpu_percent) for s in ordered]),
        metric("memory_usage_bytes", [s.memory_bytes for s in ordered]),
        metric("memory_working_set_bytes", [s.memory_bytes for s in ordered]),
    ]
    counts = {len(s.gpus) for s in ordered}
    if len(counts) != 1:
        return {"metrics": metrics if ordered else []}
    (count,) = counts
    metrics.append(metric("gpus_detected_num", [count] * len(ordered)))
    for index in range(count):
        values = [s.gpus[index].memory_used_bytes for s in ordered]
        metrics.append(metric(f"gpu_memory_usage_bytes_gpu{index}", values))
    for index in range(count):
        values = [round(s.gpus[index].utilization_percent) for s in ordered]
        metrics.append(metric(f"gpu_util_percent_gpu{index}", values))
    return {"metrics": metrics}
