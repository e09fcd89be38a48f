"""Fleet, volume and gateway routes: `/api/project/{p}/{fleets,volumes,gateways}/…`.

`list` and `get {name}` read the store; `delete {names}` asks the `Controller` (one the config
repo owns is refused: `reconciler.core.gitowned`); `get_plan` and
`apply` share the configuration handlers of the runs router (see `routes_runs`).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from reconciler.adapters.db.dstack_lookups import fleet_name_by_id, resource_origin
from reconciler.adapters.db.readmodels.capacity import (
    Kind,
    check_exists,
    get_fleet,
    get_volume,
    list_fleets,
    list_volumes,
)
from reconciler.api import models as wire
from reconciler.api import requests as req
from reconciler.core.gitowned import delete_refusal
from reconciler.errors import UsageError
from reconciler.web.auth import ProjectAccess, project_access
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import NotFoundError
from reconciler.web.routes_runs import add_plan_routes


def _add_delete(router: APIRouter, kind: Kind) -> None:
    @router.post(f"/{kind}s/delete", tags=[f"{kind}s"], operation_id=f"{kind}s_delete")
    async def delete(
        body: req.NamesRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, list[str]]:
        for name in body.names:
            await context.db.read(check_exists, access.project_id, kind, name)
            origin = await context.db.read(resource_origin, access.project_id, kind, name)
            refusal = delete_refusal(kind, name, origin)
            if refusal is not None:  # GitOps would create it again: a change
                raise UsageError(refusal)
        for name in body.names:
            await context.controller.delete_resource(access.project_name, kind, name)
        return {"deleted": body.names}


def _add_fleet_reads(router: APIRouter) -> None:
    @router.post("/fleets/list", response_model=list[wire.Fleet], tags=["fleets"])
    async def list_(
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> list[wire.Fleet]:
        return await context.db.read(list_fleets, access.project_id, access.project_name)

    @router.post("/fleets/get", response_model=wire.Fleet, tags=["fleets"])
    async def get(
        body: req.NameOrIdRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> wire.Fleet:
        name = body.name
        if name is None and body.id is not None:
            name = await context.db.read(fleet_name_by_id, access.project_id, body.id)
        if name is None:
            raise NotFoundError(f"fleet {body.name or body.id} not found")
        return await context.db.read(get_fleet, access.project_id, access.project_name, name)


def _add_volume_reads(router: APIRouter, kind: Kind) -> None:
    @router.post(
        f"/{kind}s/list",
        response_model=list[wire.Volume],
        tags=[f"{kind}s"],
        operation_id=f"{kind}s_list",
    )
    async def list_(
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> list[wire.Volume]:
        return await context.db.read(list_volumes, access.project_id, access.project_name, kind)

    @router.post(
        f"/{kind}s/get", response_model=wire.Volume, tags=[f"{kind}s"], operation_id=f"{kind}s_get"
    )
    async def get(
        body: req.NameRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> wire.Volume:
        return await context.db.read(
            get_volume, access.project_id, access.project_name, kind, body.name
        )


def build_capacity_router() -> APIRouter:
    router = APIRouter(prefix="/api/project/{project_name}")
    _add_fleet_reads(router)
    _add_volume_reads(router, "volume")
    _add_volume_reads(router, "gateway")
    for kind in ("fleet", "volume", "gateway"):
        _add_delete(router, kind)
        add_plan_routes(router, f"/{kind}s", f"{kind}s")
    return router
