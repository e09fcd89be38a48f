"""`POST /api/project/{project}/backends/{list,offers}`: a project's clusters and offers.

Members (and global admins) of the project see its entries of the server's backends file
(`reconciler.core.clusterbackends.ServerBackends.listing`): the Slurm clusters (login node,
partitions, price) and Kubernetes entries, with each credential named by its file or as
"inline", never shown. `dockyard backend list` calls it. The file is read once at server
start (`reconciler.app.build_server` keeps it in `app.state.server_backends`).
`backends/offers` reads the project's Slurm and Kubernetes clusters now (those of the
request's `backends`, both when it names none) and returns their offers matching
a run's requirements, with one line per cluster that could not be read
(`reconciler.web.clusteroffers`); `dockyard offer` lists them beside the others.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import Field

from reconciler.api.requests import Body
from reconciler.core.clusterbackends import ServerBackends
from reconciler.web.auth import ProjectAccess, project_access
from reconciler.web.clusteroffers import cluster_offers
from reconciler.web.context import WebContext, get_context


class ClusterOffersRequest(Body):
    """What `dockyard offer` asks for: a run's requirements, bounded."""

    resources: dict[str, str] = Field(default_factory=dict, max_length=8)
    spot_policy: Literal["spot", "on-demand", "auto"] = "auto"
    regions: list[str] = Field(default_factory=list, max_length=100)
    backends: list[str] = Field(default_factory=list, max_length=50)
    max_price: float | None = Field(default=None, ge=0)
    limit: int = Field(default=50, ge=1, le=1000)


def build_backends_router() -> APIRouter:
    router = APIRouter(prefix="/api/project/{project_name}", tags=["backends"])

    @router.post("/backends/list")
    async def list_backends(
        request: Request, access: ProjectAccess = Depends(project_access("user"))
    ) -> dict[str, Any]:
        clusters: ServerBackends | None = getattr(request.app.state, "server_backends", None)
        if clusters is None:
            return {"project": access.project_name, "file": None, "backends": []}
        return {
            "project": access.project_name,
            "file": clusters.path if clusters.found else None,
            "backends": clusters.listing(access.project_name),
        }

    @router.post("/backends/offers")
    async def list_cluster_offers(
        body: ClusterOffersRequest,
        request: Request,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        clusters: ServerBackends | None = getattr(request.app.state, "server_backends", None)
        kinds = [b for b in ("slurm", "kubernetes") if not body.backends or b in body.backends]
        if clusters is None or not kinds:
            return {"project": access.project_name, "offers": [], "errors": []}
        spec: dict[str, Any] = {"spot_policy": body.spot_policy, "backends": kinds}
        for key, value in (("resources", body.resources), ("regions", body.regions)):
            if value:
                spec[key] = value
        if body.max_price is not None:
            spec["max_price"] = body.max_price
        try:
            offers, errors = await cluster_offers(
                clusters, access.project_name, spec, context.catalog
            )
        except ValueError as exc:  # a malformed resource spec
            raise HTTPException(status_code=400, detail=str(exc)) from None
        return {"project": access.project_name, "offers": offers[: body.limit], "errors": errors}

    return router
