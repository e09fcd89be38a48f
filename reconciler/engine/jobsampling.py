"""A running job's resource usage, sampled now by its agent: what `metrics/job/{run}` shows.

The web layer calls `JobSampler.sample` (through the controller) when a client reads a
run's metrics (`dockyard metrics`, dstack's `metrics/job/{run}`); the agent measures the
job's CPU and memory and its own GPUs' utilization and memory (`nvidia-smi`), and the
answer becomes a `JobSample` in the job's GPU order. A job that is not running, or an
agent that cannot be reached, gives no sample (the route answers an empty list then).
"""

from __future__ import annotations

import asyncio

from agent.client import AgentError
from agent.tunnel import AgentUnreachable
from reconciler.adapters.db.store import Store
from reconciler.domain.metrics import GpuSample, JobSample
from reconciler.engine.agents import AgentDirectory

MIB = 2**20


class JobSampler:
    def __init__(self, store: Store, agents: AgentDirectory) -> None:
        self.store = store
        self.agents = agents

    async def sample(
        self, project_id: str, run_name: str, *, job_num: int = 0, replica_num: int = 0
    ) -> JobSample | None:
        found = await asyncio.to_thread(
            self.store.running_job, project_id, run_name, job_num=job_num, replica_num=replica_num
        )
        if found is None:
            return None
        client = self.agents.client(found.instance)
        try:
            metrics = await client.metrics(found.agent_job_id)
        except (AgentError, AgentUnreachable):
            return None
        gpus = sorted(metrics.gpus, key=lambda gpu: gpu.index)
        return JobSample(
            timestamp=metrics.timestamp,
            cpu_percent=metrics.cpu_percent,
            memory_bytes=metrics.memory_bytes,
            gpus=tuple(GpuSample(g.utilization, g.memory_used_mib * MIB, g.index) for g in gpus),
        )
