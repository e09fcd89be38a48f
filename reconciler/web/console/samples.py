"""The usage samples a server has taken of each job, newest last, bounded (in memory).

Every read of a run's metrics through the console or the API samples the job's agent
(`Controller.sample_job`); the console keeps the samples here to draw them over time while
someone watches. At most `per_job` samples of at most `jobs` jobs (the least recently
sampled go first): a few MB at the defaults. Samples are per server process and start
again after a restart.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

from reconciler.domain.metrics import GpuSample, JobSample


class SampleBook:
    def __init__(self, *, jobs: int = 200, per_job: int = 360) -> None:
        self._jobs = jobs
        self._per_job = per_job
        self._samples: OrderedDict[str, deque[JobSample]] = OrderedDict()

    def add(self, key: str, sample: JobSample) -> None:
        kept = self._samples.pop(key, None) or deque(maxlen=self._per_job)
        if not kept or kept[-1].timestamp < sample.timestamp:
            kept.append(sample)
        self._samples[key] = kept
        while len(self._samples) > self._jobs:
            self._samples.popitem(last=False)

    def of(self, key: str) -> list[JobSample]:
        return list(self._samples.get(key, ()))


def combined(samples: Sequence[JobSample], at: float) -> JobSample:
    """An instance's usage from its running jobs' samples (pure): CPU and memory added up,
    each GPU once by its host index, in host order."""
    gpus: dict[int, GpuSample] = {}
    for sample in samples:
        for gpu in sample.gpus:
            gpus[gpu.host_index] = gpu
    return JobSample(
        timestamp=at,
        cpu_percent=sum(s.cpu_percent for s in samples),
        memory_bytes=sum(s.memory_bytes for s in samples),
        gpus=tuple(gpus[index] for index in sorted(gpus)),
    )
