"""The console's capacity and settings pages: fleets and instances (GPUs, what each runs,
how busy), volumes and gateways, secrets (names only, never values), and, for global admins
as in the API, the webhook deliveries. Added by `pages.build_console_router`.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from reconciler.api import models as wire
from reconciler.web.console.access import DeniedError, project_of
from reconciler.web.console.state import Console
from reconciler.web.context import WebContext, get_context
from reconciler.web.queries_capacity import list_fleets, list_volumes
from reconciler.web.queries_project import list_deliveries, list_secrets
from reconciler.web.queries_runs import list_runs


def instance_rows(fleets: list[wire.Fleet], runs: list[wire.Run]) -> list[dict[str, Any]]:
    """Per instance: its GPUs (name x count), the runs on it now, blocks busy of total."""
    on: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        for job in run.jobs:
            sub = job.job_submissions[-1] if job.job_submissions else None
            data = sub.job_provisioning_data if sub else None
            if sub and data and sub.status in ("provisioning", "pulling", "running"):
                on[str(data.get("instance_id"))].append(run.run_spec.get("run_name") or "?")
    rows = []
    for fleet in fleets:
        for instance in fleet.instances:
            gpus = (instance.resources or {}).get("gpus") or []
            names: dict[str, int] = {}
            for gpu in gpus:
                key = f"{gpu.get('name')}:{round(float(gpu.get('memory_mib') or 0) / 1024)}GB"
                names[key] = names.get(key, 0) + 1
            rows.append(
                {
                    "fleet": fleet.name,
                    "instance": instance,
                    "gpus": ", ".join(f"{name} x{count}" for name, count in names.items()) or "-",
                    "runs": sorted(set(on.get(instance.id, []))),
                    "busy": f"{instance.busy_blocks}/{instance.total_blocks}",
                    "busy_percent": round(
                        100 * instance.busy_blocks / max(instance.total_blocks, 1)
                    ),
                }
            )
    return rows


def add_capacity_pages(router: APIRouter, console: Console) -> None:
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
