"""`POST /api/project/{project}/backends/list`: the clusters the server has for a project.

Members (and global admins) of the project see its entries of the server's backends file
(`reconciler.core.clusterbackends.ServerBackends.listing`): the Slurm clusters (login node,
partitions, price) and Kubernetes entries, with each credential named by its file or as
"inline", never shown. `dockyard backend list` calls it. The file is read once at server
start (`reconciler.app.build_server` keeps it in `app.state.server_backends`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from reconciler.core.clusterbackends import ServerBackends
from reconciler.web.auth import ProjectAccess, project_access


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

    return router
