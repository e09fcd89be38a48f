"""dstack's `metrics/job/{run}` and `gpus/list`: what a job uses now, and which GPUs exist.

`metrics/job/{run_name}` asks the job's agent for a sample now (CPU, memory, and the
utilization and memory of the job's own GPUs, from `nvidia-smi` on its host) and answers
dstack's `JobMetrics` with that one point; a job that is not running answers an empty
list, as dstack does when it has no samples. `gpus/list` groups the GPUs of the project's
instances (local and SSH hosts as dstack's `remote` backend). Registered by `routes_dstack`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict

from reconciler.adapters.db.readmodels.runs import get_run
from reconciler.core.jobmetrics import dstack_job_metrics
from reconciler.web.auth import ProjectAccess, project_access
from reconciler.web.context import WebContext, get_context


class ListGpusBody(BaseModel):
    """dstack sends its whole `run_spec` and more; only the grouping matters here."""

    model_config = ConfigDict(extra="ignore")

    group_by: list[str] | None = None


def add_metrics_routes(router: APIRouter, now: Any) -> None:
    @router.get("/metrics/job/{run_name}", tags=["dstack"])
    async def job_metrics(
        run_name: str,
        replica_num: int = 0,
        job_num: int = 0,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        # 400 resource_not_exists for an unknown run, as dstack answers
        await context.db.read(
            get_run, access.project_id, access.project_name, run_name, now(context)
        )
        sample = await context.controller.sample_job(
            access.project_id, run_name, job_num=job_num, replica_num=replica_num
        )
        return dstack_job_metrics([sample] if sample is not None else [])

    @router.post("/gpus/list", tags=["dstack"])
    async def list_gpus(
        body: ListGpusBody | None = None,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        group_by = [g for g in (body.group_by if body else None) or () if g in ("backend", "count")]
        return {"gpus": await context.controller.list_gpus(access.project_id, group_by)}
