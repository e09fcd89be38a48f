"""What dstack 0.22.5's CLI and Python API call that our own client does not.

- `runs/get_plan` and `runs/apply` with dstack's bodies (`{run_spec}`, `{plan: {run_spec}}`)
  are answered here (`plan_run_spec`, `apply_run_spec`, called by `routes_runs`): the
  posted configuration goes through the same unmanaged plan/apply as `dockyard apply`
  (so it is `cli:<user>`, and a Git-owned run is refused with the same message), and the
  answer is dstack's `RunPlan` / `Run`.
- `repos/{init,get,list,upload_code}` and a run spec's repo: `dstack_repos`; its
  `file_archives` (dstack's `files:`): `dstack_uploads`.
- `metrics/job/{run}`, `gpus/list`, `instances/list`, `fleets/delete_instances`,
  `/api/events/list` (dstack's global event list).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends

from reconciler.adapters.db.dstack_lookups import (
    all_project_names,
    events_of_projects,
    fleet_instances,
    instances_of_projects,
    leave_fleet_instances,
    project_ids_by_name,
    project_names_of_member,
)
from reconciler.adapters.db.readmodels.capacity import Kind, get_fleet, get_volume
from reconciler.adapters.db.readmodels.runs import FINISHED_RUN, get_run
from reconciler.api import models as wire
from reconciler.api import requests as req
from reconciler.core.dstack_wire import run_plan, strip_nulls
from reconciler.core.fleet_instances import LEAVING_REASON, InstanceView, leaving_instances
from reconciler.domain.history import EventRecord
from reconciler.errors import UsageError
from reconciler.web.auth import Principal, ProjectAccess, project_access, require_user
from reconciler.web.context import WebContext, get_context
from reconciler.web.dstack_attach import attachable
from reconciler.web.dstack_repos import add_repo_routes, dstack_repo
from reconciler.web.dstack_uploads import dstack_file_archives
from reconciler.web.errors import InvalidError, NotFoundError
from reconciler.web.routes_metrics import add_metrics_routes

RUN_TYPES = ("task", "service", "dev-environment")


def event_wire(row: EventRecord, project: str, project_id: str) -> dict[str, Any]:
    """dstack's `Event`; an event about no single object targets its project."""
    target = {"type": row.target_type, "id": row.target_id, "name": row.target_name}
    if row.target_id is None:
        target = {"type": "project", "id": project_id, "name": project}
    return {
        "id": row.id,
        "message": row.message,
        "recorded_at": row.created_at.isoformat(),
        "actor_user_id": None,
        "actor_user": None,
        "targets": [{**target, "project_id": project_id, "project_name": project}],
    }


def _now(context: WebContext) -> datetime:
    return datetime.fromtimestamp(context.clock.now_ts(), UTC)


# What a nameless configuration is planned as (dstack's `offer` asks without a name).
OFFERS_ONLY_NAME = "offers-only"


def run_configuration(
    run_spec: dict[str, Any], *, unnamed: str | None = None
) -> tuple[dict[str, Any], str]:
    """The configuration (named after the run, or `unnamed`) and its path, from `run_spec`."""
    configuration = run_spec.get("configuration")
    if not isinstance(configuration, dict):
        raise InvalidError("run_spec.configuration: expected a run configuration object")
    configuration = strip_nulls(configuration)
    if configuration.get("type") not in RUN_TYPES:
        raise InvalidError(f"run_spec.configuration.type: expected one of {', '.join(RUN_TYPES)}")
    name = run_spec.get("run_name") or configuration.get("name") or unnamed
    if not name:
        raise InvalidError("run_spec.run_name: set `name:` so the run can be found again")
    configuration["name"] = name
    path = str(run_spec.get("configuration_path") or ".dstack.yml")
    return configuration, path


async def _current(context: WebContext, access: ProjectAccess, name: str) -> wire.Run | None:
    try:
        run = await context.db.read(
            get_run, access.project_id, access.project_name, name, _now(context)
        )
    except NotFoundError:
        return None
    return await attachable(context, access.principal, run)


async def _with_uploads(
    context: WebContext,
    access: ProjectAccess,
    run_spec: dict[str, Any],
    configuration: dict[str, Any],
    *,
    applying: bool,
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The configuration with dstack's repo in it, and the archives of its repo diff and
    its `files`."""
    configuration, repo_archives = await dstack_repo(
        context, access, run_spec, configuration, applying=applying
    )
    return configuration, [*repo_archives, *await dstack_file_archives(context, access, run_spec)]


async def plan_run_spec(
    context: WebContext, access: ProjectAccess, run_spec: dict[str, Any]
) -> dict[str, Any]:
    """dstack's `RunPlan` of the posted `run_spec` (a Git-owned run is refused); a nameless
    one (dstack's `offer`) is planned as a new run, for its offers."""
    configuration, path = run_configuration(run_spec, unnamed=OFFERS_ONLY_NAME)
    configuration, archives = await _with_uploads(
        context, access, run_spec, configuration, applying=False
    )
    plan = await context.controller.plan_unmanaged(
        access.project_name,
        text=json.dumps(configuration),
        path=path,
        user=access.principal.username,
        file_archives=archives,
    )
    if plan.get("action") == "blocked":
        raise UsageError(str(plan.get("reason")))
    named = configuration["name"] != OFFERS_ONLY_NAME
    current = await _current(context, access, configuration["name"]) if named else None
    return run_plan(
        project=access.project_name,
        user=access.principal.username,
        run_spec=run_spec,
        configuration=configuration if named else {**configuration, "name": None},
        offers=plan.get("offers") or [],
        action=str(plan.get("action")),
        current=current.model_dump(mode="json") if current else None,
    )


async def apply_run_spec(
    context: WebContext, access: ProjectAccess, plan: dict[str, Any], force: bool
) -> wire.Run:
    """Apply dstack's `{run_spec}`: a finished run of the same name is submitted again; a
    nameless one gets a new name, as dstack's server gives it."""
    run_spec = plan.get("run_spec")
    if not isinstance(run_spec, dict):
        raise InvalidError("plan.run_spec: expected dstack's run spec object")
    configuration, path = run_configuration(run_spec, unnamed=f"run-{secrets.token_hex(3)}")
    configuration, archives = await _with_uploads(
        context, access, run_spec, configuration, applying=True
    )
    current = await _current(context, access, configuration["name"])
    rerun = current is not None and current.status in FINISHED_RUN
    await context.controller.apply_unmanaged(
        access.project_name,
        text=json.dumps(configuration),
        path=path,
        user=access.principal.username,
        force=force or rerun,
        file_archives=archives,
    )
    run = await _current(context, access, configuration["name"])
    if run is None:
        raise NotFoundError(f"run {configuration['name']} was not created")
    return run


def spec_configuration(kind: str, spec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The configuration and path of dstack's fleet/volume/gateway `spec`."""
    configuration = spec.get("configuration")
    if not isinstance(configuration, dict):
        raise InvalidError(f"spec.configuration: expected a {kind} configuration object")
    configuration = strip_nulls(configuration)
    configuration.setdefault("type", kind)
    if configuration.get("type") != kind:
        raise InvalidError(f"spec.configuration.type: expected {kind}")
    if not configuration.get("name"):
        raise InvalidError(f"spec.configuration.name: set `name:` so the {kind} can be found")
    return configuration, str(spec.get("configuration_path") or f"{kind}.dstack.yml")


async def _current_capacity(
    context: WebContext, access: ProjectAccess, kind: Kind, name: str
) -> dict[str, Any] | None:
    try:
        if kind == "fleet":
            fleet = await context.db.read(get_fleet, access.project_id, access.project_name, name)
            return fleet.model_dump(mode="json")
        item = await context.db.read(get_volume, access.project_id, access.project_name, kind, name)
        return item.model_dump(mode="json")
    except NotFoundError:
        return None


async def plan_capacity_spec(
    context: WebContext, access: ProjectAccess, kind: Kind, spec: dict[str, Any]
) -> dict[str, Any]:
    """dstack's `FleetPlan` / `VolumePlan` / `GatewayPlan` of the posted `spec`."""
    configuration, path = spec_configuration(kind, spec)
    plan = await context.controller.plan_unmanaged(
        access.project_name,
        text=json.dumps(configuration),
        path=path,
        user=access.principal.username,
    )
    if plan.get("action") == "blocked":
        raise UsageError(str(plan.get("reason")))
    current = await _current_capacity(context, access, kind, configuration["name"])
    action = (
        "update" if current is not None and plan.get("action") in ("update", "noop") else "create"
    )
    return {
        "project_name": access.project_name,
        "user": access.principal.username,
        "spec": spec,
        "effective_spec": spec,
        "offers": [],
        "total_offers": 0,
        "max_offer_price": None,
        "current_resource": current,
        "action": action,
        "dockyard_plan": plan,
    }


async def apply_capacity_spec(
    context: WebContext, access: ProjectAccess, kind: Kind, spec: dict[str, Any], force: bool
) -> dict[str, Any]:
    """Apply dstack's `spec` as `cli:<user>`; the fleet/volume/gateway as it is now."""
    configuration, path = spec_configuration(kind, spec)
    await context.controller.apply_unmanaged(
        access.project_name,
        text=json.dumps(configuration),
        path=path,
        user=access.principal.username,
        force=force,
    )
    current = await _current_capacity(context, access, kind, configuration["name"])
    if current is None:
        raise NotFoundError(f"{kind} {configuration['name']} was not created")
    return current


def _add_metrics_routes(router: APIRouter) -> None:
    add_metrics_routes(router, _now)


def _add_capacity_routes(router: APIRouter) -> None:
    for kind in ("volume", "gateway"):
        _add_create(router, kind)

    @router.post("/fleets/delete_instances", tags=["dstack"])
    async def delete_instances(
        body: req.DeleteInstancesRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        """A cloud fleet's idle top-most instances leave as an idle scale-down makes them
        (`reconciler.core.fleet_instances` says which may, and why not)."""
        found = await context.db.read(fleet_instances, access.project_id, body.name)
        if found is None:
            raise NotFoundError(f"fleet {body.name} not found")
        spec, rows = found
        views = [InstanceView(num, status, busy) for num, status, busy in rows]
        nums = leaving_instances(body.name, spec or {}, views, body.instance_nums)
        await context.db.write(
            leave_fleet_instances, access.project_id, body.name, nums, LEAVING_REASON
        )
        context.controller.hint("fleets")
        return {}


def _add_create(router: APIRouter, kind: Kind) -> None:
    @router.post(f"/{kind}s/create", tags=["dstack"], operation_id=f"dstack_{kind}s_create")
    async def create(
        body: req.ConfigurationRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        """dstack's `{volumes,gateways}/create {configuration}`: an apply of that config."""
        if body.configuration is None:
            raise InvalidError("configuration: expected a configuration object")
        spec = {"configuration": body.configuration}
        return await apply_capacity_spec(context, access, kind, spec, force=False)


def build_dstack_project_router() -> APIRouter:
    router = APIRouter(prefix="/api/project/{project_name}")
    add_repo_routes(router)
    _add_metrics_routes(router)
    _add_capacity_routes(router)
    return router


def build_dstack_global_router() -> APIRouter:
    router = APIRouter(prefix="/api")

    @router.post("/instances/list", tags=["dstack"])
    async def list_instances(
        body: req.InstancesListRequest,
        principal: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> list[dict[str, Any]]:
        """dstack's instance list: the live instances of the caller's projects."""
        names = body.project_names
        if not principal.is_admin:
            mine = await context.db.read(project_names_of_member, principal.user_id)
            names = [n for n in mine if names is None or n in names]
        found = await context.db.read(instances_of_projects, names, body.limit)
        return [instance.model_dump(mode="json") for instance in found]

    _add_events_route(router)
    return router


def _add_events_route(router: APIRouter) -> None:
    @router.post("/events/list", tags=["dstack"])
    async def list_events(
        body: req.GlobalEventsRequest,
        principal: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> list[dict[str, Any]]:
        """dstack's event list over the caller's projects (`within_projects` narrows it)."""
        if principal.is_admin:
            names = await context.db.read(all_project_names)
        else:
            names = await context.db.read(project_names_of_member, principal.user_id)
        ids = await context.db.read(project_ids_by_name, names)
        wanted = body.within_projects or body.target_projects
        project_ids = [i for i in ids.values() if wanted is None or i in wanted]
        rows = await context.db.read(
            events_of_projects,
            project_ids,
            target_ids=body.target_ids(),
            after=body.prev_recorded_at,
            ascending=body.ascending,
            limit=body.limit,
        )
        by_name = {name: project_id for name, project_id in ids.items()}
        return [event_wire(row, project, by_name[project]) for row, project in rows]
