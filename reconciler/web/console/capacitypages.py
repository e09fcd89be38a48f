"""The console's capacity and settings pages: fleets and instances (GPUs, what each runs,
how busy), volumes and gateways, secrets (names only, never values), and, for global admins
as in the API, the webhook deliveries. Added by `pages.build_console_router`.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from reconciler.adapters.db.readmodels.capacity import list_fleets, list_volumes
from reconciler.adapters.db.readmodels.project import list_deliveries, list_secrets
from reconciler.adapters.db.readmodels.runs import list_runs
from reconciler.api import models as wire
from reconciler.domain.metrics import GpuSample, JobSample
from reconciler.web.auth import ProjectAccess
from reconciler.web.console.access import DeniedError, project_of
from reconciler.web.console.rendering import SECURITY_HEADERS
from reconciler.web.console.runpages import usage_charts
from reconciler.web.console.samples import combined
from reconciler.web.console.state import Console
from reconciler.web.context import WebContext, get_context


def runs_on(runs: list[wire.Run]) -> dict[str, list[str]]:
    """Instance id → the runs with a job starting or running there now."""
    on: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        for job in run.jobs:
            sub = job.job_submissions[-1] if job.job_submissions else None
            data = sub.job_provisioning_data if sub else None
            if sub and data and sub.status in ("provisioning", "pulling", "running"):
                on[str(data.get("instance_id"))].append(run.run_spec.get("run_name") or "?")
    return on


def instance_row(fleet: str, instance: wire.Instance, on: dict[str, list[str]]) -> dict[str, Any]:
    """An instance's GPUs (name x count), the runs on it now, blocks busy of total."""
    names: dict[str, int] = {}
    for gpu in (instance.resources or {}).get("gpus") or []:
        key = f"{gpu.get('name')}:{round(float(gpu.get('memory_mib') or 0) / 1024)}GB"
        names[key] = names.get(key, 0) + 1
    return {
        "fleet": fleet,
        "instance": instance,
        "gpus": ", ".join(f"{name} x{count}" for name, count in names.items()) or "-",
        "runs": sorted(set(on.get(instance.id, []))),
        "busy": f"{instance.busy_blocks}/{instance.total_blocks}",
        "busy_percent": round(100 * instance.busy_blocks / max(instance.total_blocks, 1)),
    }


def instance_rows(fleets: list[wire.Fleet], runs: list[wire.Run]) -> list[dict[str, Any]]:
    on = runs_on(runs)
    return [instance_row(f.name, i, on) for f in fleets for i in f.instances]


def jobs_on(instance_id: str, runs: list[wire.Run]) -> list[tuple[str, int, int]]:
    """(run, job_num, replica_num) of each job running on the instance now."""
    found = []
    for run in runs:
        for job in run.jobs:
            sub = job.job_submissions[-1] if job.job_submissions else None
            data = (sub.job_provisioning_data if sub else None) or {}
            if sub and sub.status == "running" and data.get("instance_id") == instance_id:
                spec = job.job_spec
                name = str(run.run_spec.get("run_name"))
                found.append((name, int(spec.get("job_num", 0)), int(spec.get("replica_num", 0))))
    return found


async def _instance(
    context: WebContext, console: Console, request: Request, project: str, name: str
) -> tuple[ProjectAccess, wire.Instance, list[wire.Run]]:
    viewer = await console.viewer(request, context)
    access = await project_of(context, viewer, project)
    fleets = await context.db.read(list_fleets, access.project_id, project)
    found = [i for f in fleets for i in f.instances if i.name == name]
    if not found:
        raise DeniedError(404, f"instance {name} not found in project {project}")
    now = datetime.fromtimestamp(context.clock.now_ts(), UTC)
    runs = await context.db.read(
        list_runs, access.project_id, project, all_runs=False, limit=1000, now=now
    )
    return access, found[0], runs


def add_instance_pages(router: APIRouter, console: Console) -> None:
    @router.get("/console/p/{project}/instances/{name}")
    async def instance(
        project: str, name: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            _, found, runs = await _instance(context, console, request, project, name)
            charts = usage_charts(console.samples.of(f"instance:{project}/{name}"))
            return console.page(
                "instance.html",
                viewer,
                project=project,
                instance=found,
                charts=charts,
                row=instance_row(found.fleet_name or "", found, runs_on(runs)),
            )

        return await console.guard(request, body)

    @router.get("/console/p/{project}/instances/{name}/charts")
    async def instance_charts(
        project: str, name: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            access, found, runs = await _instance(context, console, request, project, name)
            samples = []
            for run_name, job_num, replica_num in jobs_on(found.id, runs):
                sample = await context.controller.sample_job(
                    access.project_id, run_name, job_num=job_num, replica_num=replica_num
                )
                if sample is not None:
                    samples.append(sample)
            gpus = len((found.resources or {}).get("gpus") or [])
            key = f"instance:{project}/{name}"
            console.samples.add(
                key, with_idle_gpus(combined(samples, context.clock.now_ts()), gpus)
            )
            svg = "".join(usage_charts(console.samples.of(key)))
            return HTMLResponse(svg, headers=SECURITY_HEADERS)

        return await console.guard(request, body)


def with_idle_gpus(sample: JobSample, count: int) -> JobSample:
    """The sample with every GPU of the host, 0 for those no job uses."""
    used = {gpu.host_index: gpu for gpu in sample.gpus}
    gpus = tuple(used.get(i, GpuSample(0.0, 0, i)) for i in range(max(count, len(used))))
    return JobSample(sample.timestamp, sample.cpu_percent, sample.memory_bytes, gpus)


def add_capacity_pages(router: APIRouter, console: Console) -> None:
    add_instance_pages(router, console)

    @router.get("/console/p/{project}/fleets")
    async def fleets(
        project: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            found = await context.db.read(list_fleets, access.project_id, project)
            now = datetime.fromtimestamp(context.clock.now_ts(), UTC)
            runs = await context.db.read(
                list_runs, access.project_id, project, all_runs=False, limit=1000, now=now
            )
            return console.page(
                "fleets.html",
                viewer,
                project=project,
                fleets=found,
                instances=instance_rows(found, runs),
            )

        return await console.guard(request, body)

    @router.get("/console/p/{project}/volumes")
    async def volumes(
        project: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            found = await context.db.read(list_volumes, access.project_id, project, "volume")
            gateways = await context.db.read(list_volumes, access.project_id, project, "gateway")
            return console.page(
                "volumes.html", viewer, project=project, volumes=found, gateways=gateways
            )

        return await console.guard(request, body)

    @router.get("/console/p/{project}/secrets")
    async def secrets(
        project: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            found = await context.db.read(list_secrets, access.project_id)
            names = sorted(secret.name for secret in found)  # never a value
            return console.page("secrets.html", viewer, project=project, names=names)

        return await console.guard(request, body)

    @router.get("/console/deliveries")
    async def deliveries(request: Request, context: WebContext = Depends(get_context)) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            if not viewer.principal.is_admin:  # as the API: deliveries are a global admin's
                raise DeniedError(403, "only a global admin may see webhook deliveries")
            found = await context.db.read(list_deliveries, 100)
            return console.page("deliveries.html", viewer, deliveries=found)

        return await console.guard(request, body)
