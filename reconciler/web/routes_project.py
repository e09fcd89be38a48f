"""Project routes beyond runs and capacity: events, reconciles, secrets, offers; deliveries.

- `…/events/list` — the project's events, oldest first, the last `limit`.
- `…/reconciles/{list,get,trigger}` — GitOps passes; `trigger` queues one now.
- `…/secrets/{list,get,create_or_update,delete}` — names for members; the plain value only
  to admins (`get`), never in any list and never logged. Managers may set and delete.
- `/api/deliveries/list` — webhook deliveries (server-wide, global admins).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from reconciler.adapters.db.readmodels import project as q
from reconciler.api import models as wire
from reconciler.api import requests as req
from reconciler.web.auth import Principal, ProjectAccess, project_access, require_admin
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import InvalidError
from reconciler.web.offers import find_offers


def _now(context: WebContext) -> datetime:
    return datetime.fromtimestamp(context.clock.now_ts(), UTC)


def _add_history_routes(router: APIRouter) -> None:
    @router.post("/events/list", response_model=list[wire.Event], tags=["events"])
    async def list_events(
        body: req.EventsRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> list[wire.Event]:
        return await context.db.read(
            q.list_events,
            access.project_id,
            access.project_name,
            limit=body.limit,
            since=body.since,
            target_type=body.target_type,
            target_name=body.target_name,
        )

    @router.post("/reconciles/list", response_model=list[wire.Reconcile], tags=["reconciles"])
    async def list_reconciles(
        body: req.ListRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> list[wire.Reconcile]:
        return await context.db.read(
            q.list_reconciles, access.project_id, access.project_name, body.limit
        )

    @router.post("/reconciles/get", response_model=wire.Reconcile, tags=["reconciles"])
    async def get_reconcile(
        body: req.ReconcileGetRequest,
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> wire.Reconcile:
        return await context.db.read(
            q.get_reconcile, access.project_id, access.project_name, body.id
        )

    @router.post("/reconciles/trigger", response_model=wire.Reconcile, tags=["reconciles"])
    async def trigger(
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> wire.Reconcile:
        reconcile_id = await context.controller.request_reconcile(
            access.project_name, trigger="api"
        )
        return await context.db.read(
            q.get_reconcile, access.project_id, access.project_name, reconcile_id
        )


def _add_secret_routes(router: APIRouter) -> None:
    @router.post("/secrets/list", response_model=list[wire.Secret], tags=["secrets"])
    async def list_secrets(
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> list[wire.Secret]:
        return await context.db.read(q.list_secrets, access.project_id)

    @router.post("/secrets/get", response_model=wire.Secret, tags=["secrets"])
    async def get_secret(
        body: req.SecretNameRequest,
        access: ProjectAccess = Depends(project_access("admin")),
        context: WebContext = Depends(get_context),
    ) -> wire.Secret:
        secret_id, ciphertext = await context.db.read(
            q.get_secret_ciphertext, access.project_id, body.name
        )
        return wire.Secret(id=secret_id, name=body.name, value=context.secrets.decrypt(ciphertext))

    @router.post("/secrets/create_or_update", response_model=wire.Secret, tags=["secrets"])
    async def set_secret(
        body: req.SecretSetRequest,
        access: ProjectAccess = Depends(project_access("manager")),
        context: WebContext = Depends(get_context),
    ) -> wire.Secret:
        ciphertext = context.secrets.encrypt(body.value)
        return await context.db.write(
            q.put_secret, access.project_id, body.name, ciphertext, _now(context)
        )

    @router.post("/secrets/delete", tags=["secrets"])
    async def delete_secret(
        body: req.SecretsDeleteRequest,
        access: ProjectAccess = Depends(project_access("manager")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        names = body.names()
        if not names:
            raise InvalidError("name a secret to delete (`name` or `secrets_names`)")
        for name in names:
            await context.db.write(q.delete_secret, access.project_id, name)
        return {"deleted": names[0] if body.name else names}


def _add_offer_routes(router: APIRouter) -> None:
    @router.post("/offers/list", tags=["offers"])
    async def list_offers(
        body: req.OffersRequest,
        access: ProjectAccess = Depends(project_access("user")),
    ) -> dict[str, Any]:
        try:
            offers = find_offers(body.gpu, body.limit)
        except ValueError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        return {"project": access.project_name, "offers": offers}


def build_project_router() -> APIRouter:
    router = APIRouter(prefix="/api/project/{project_name}")
    _add_history_routes(router)
    _add_secret_routes(router)
    _add_offer_routes(router)
    return router


def build_deliveries_router() -> APIRouter:
    router = APIRouter(prefix="/api/deliveries", tags=["deliveries"])

    @router.post("/list", response_model=list[wire.Delivery])
    async def list_deliveries(
        body: req.ListRequest,
        _: Principal = Depends(require_admin),
        context: WebContext = Depends(get_context),
    ) -> list[wire.Delivery]:
        return await context.db.read(q.list_deliveries, body.limit)

    return router
