"""Run routes, dstack-style: `/api/project/{p}/runs/{list,get,get_plan,apply,stop,delete}`.

Reads come from the store; plan, apply, stop and delete go through the `Controller`, which
owns the runtime. `get_plan`/`apply` take one configuration as YAML `text` (or a parsed
`configuration` dict) with its `path`, for any kind (tasks, services, dev environments,
fleets, volumes, gateways), so `dockyard apply -f` needs one route; dstack's bodies
(`{run_spec}`, `{plan: {run_spec}}`) are answered by `routes_dstack` in dstack's shapes.
The same handlers are mounted under `…/fleets/`, `…/volumes/` and `…/gateways/` for dstack's paths.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends

from reconciler.adapters.db.readmodels.capacity import Kind
from reconciler.adapters.db.readmodels.pages import list_runs_paged
from reconciler.adapters.db.readmodels.runs import get_run, get_run_by_id, list_runs
from reconciler.api import models as wire
from reconciler.api import requests as req
from reconciler.core.gitowned import delete_refusal, stop_warning
from reconciler.errors import UsageError
from reconciler.web.auth import Principal, ProjectAccess, project_access, require_user
from reconciler.web.context import WebContext, get_context
from reconciler.web.dstack_attach import attachable
from reconciler.web.errors import InvalidError, NotFoundError
from reconciler.web.routes_dstack import (
    apply_capacity_spec,
    apply_run_spec,
    plan_capacity_spec,
    plan_run_spec,
)
from reconciler.web.routes_files import attach_archives


def _now(context: WebContext) -> datetime:
    return datetime.fromtimestamp(context.clock.now_ts(), UTC)


def config_text(body: req.ConfigurationRequest) -> str:
    """The YAML text of the posted configuration (JSON is YAML)."""
    if body.text is not None:
        return body.text
    if body.configuration is not None:
        return json.dumps(body.configuration)
    raise InvalidError("post the configuration as 'text' (YAML) or 'configuration' (an object)")


async def file_archives(
    body: req.ConfigurationRequest, access: ProjectAccess, context: WebContext
) -> list[dict[str, str]]:
    """The posted archive references, each uploaded, within the project's upload quota."""
    refs = [(ref.id, ref.path) for ref in body.file_archives]
    return await attach_archives(context, access.project_id, access.project_name, refs)


_CAPACITY: dict[str, Kind] = {"fleets": "fleet", "volumes": "volume", "gateways": "gateway"}


def add_plan_routes(router: APIRouter, prefix: str, tag: str) -> None:
    """`{prefix}/get_plan` and `{prefix}/apply` for one kind (all share the handlers)."""

    @router.post(f"{prefix}/get_plan", tags=[tag], operation_id=f"{tag}_get_plan")
    async def get_plan(
        body: req.ConfigurationRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        if body.run_spec is not None:
            return await plan_run_spec(context, access, body.run_spec)
        if body.spec is not None and tag in _CAPACITY:
            return await plan_capacity_spec(context, access, _CAPACITY[tag], body.spec)
        return await context.controller.plan_unmanaged(
            access.project_name,
            text=config_text(body),
            path=body.path,
            user=access.principal.username,
            file_archives=await file_archives(body, access, context),
        )

    @router.post(f"{prefix}/apply", tags=[tag], operation_id=f"{tag}_apply")
    async def apply(
        body: req.ApplyRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        if body.plan is not None and "run_spec" in body.plan:
            run = await apply_run_spec(context, access, body.plan, body.force)
            return run.model_dump(mode="json")
        if body.plan is not None and isinstance(body.plan.get("spec"), dict) and tag in _CAPACITY:
            return await apply_capacity_spec(
                context, access, _CAPACITY[tag], body.plan["spec"], body.force
            )
        return await context.controller.apply_unmanaged(
            access.project_name,
            text=config_text(body),
            path=body.path,
            user=access.principal.username,
            force=body.force,
            file_archives=await file_archives(body, access, context),
        )


def build_runs_router() -> APIRouter:
    router = APIRouter(prefix="/api/project/{project_name}")
    add_plan_routes(router, "/runs", "runs")

    @router.post("/runs/list", response_model=list[wire.Run], tags=["runs"])
    async def list_(
        body: req.RunsListRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> list[wire.Run]:
        return await context.db.read(
            list_runs,
            access.project_id,
            access.project_name,
            all_runs=body.all,
            limit=body.limit,
            now=_now(context),
        )

    @router.post("/runs/get", response_model=wire.Run, tags=["runs"])
    async def get(
        body: req.RunGetRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> wire.Run:
        if body.run_name is None and body.id is not None:
            run = await context.db.read(
                get_run_by_id, access.project_id, access.project_name, str(body.id), _now(context)
            )
            return await attachable(context, access.principal, run)
        if body.run_name is None:
            raise NotFoundError("run not found: name a run (run_name) or its id")
        run = await context.db.read(
            get_run, access.project_id, access.project_name, body.run_name, _now(context)
        )
        return await attachable(context, access.principal, run)

    @router.post("/runs/stop", tags=["runs"])
    async def stop(
        body: req.StopRunsRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, list[str]]:
        warnings = []  # a Git-owned run may be stopped; say what the next reconcile does
        for name in body.runs_names:
            run = await context.db.read(
                get_run, access.project_id, access.project_name, name, _now(context)
            )
            warning = stop_warning(_run_type(run), name, run.origin)
            warnings += [warning] if warning else []
        for name in body.runs_names:
            await context.controller.stop_run(access.project_name, name, abort=body.abort)
        return {"stopped": body.runs_names, "warnings": warnings}

    @router.post("/runs/delete", tags=["runs"])
    async def delete(
        body: req.DeleteRunsRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, list[str]]:
        for name in body.runs_names:
            run = await context.db.read(
                get_run, access.project_id, access.project_name, name, _now(context)
            )
            refusal = delete_refusal(_run_type(run), name, run.origin)
            if refusal is not None:  # GitOps would run it again as new: a change
                raise UsageError(refusal)
        for name in body.runs_names:
            await context.controller.delete_resource(access.project_name, "run", name)
        return {"deleted": body.runs_names}

    return router


def build_global_runs_router() -> APIRouter:
    """`/api/runs/list`: dstack's list across the caller's projects, paged by `prev_*`."""
    router = APIRouter(prefix="/api/runs")

    @router.post("/list", response_model=list[wire.Run], tags=["runs"])
    async def list_all(
        body: req.GlobalRunsListRequest,
        principal: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> list[wire.Run]:
        return await context.db.read(list_runs_paged, principal, body, _now(context))

    return router


def _run_type(run: wire.Run) -> str:
    configuration = run.run_spec.get("configuration")
    kind = configuration.get("type") if isinstance(configuration, dict) else None
    return str(kind or "run")
