"""`/api/notifications/…`: receivers (global admins only) and the deliveries' outcomes.

Only a global admin defines, lists or deletes receivers: a receiver's URL is where the
server makes requests from inside its network (docs/security.md, "Notifications"), and its
secret is never answered back. Anyone signed in may list deliveries: an admin sees all, a
member only those of their projects. The store (`NotificationsStore`) is on
`app.state.notifications`, set by the composition root.
"""

from __future__ import annotations

from dataclasses import asdict

import anyio.to_thread
from fastapi import APIRouter, Depends, HTTPException, Request

from reconciler.adapters.db.notifications import NotificationsStore
from reconciler.api.notifications import (
    DELIVERIES,
    RECEIVERS,
    DeliveriesRequest,
    NotificationInfo,
    ReceiverAdd,
    ReceiverInfo,
    ReceiverName,
)
from reconciler.core.notifying import check_receiver, shown_url
from reconciler.domain.notifications import Receiver
from reconciler.web.auth import Principal, require_admin, require_user
from reconciler.web.errors import NotFoundError


def _store(request: Request) -> NotificationsStore:
    store = getattr(request.app.state, "notifications", None)
    if not isinstance(store, NotificationsStore):
        raise HTTPException(status_code=503, detail="notifications are not set up on this server")
    return store


def _info(receiver: Receiver) -> ReceiverInfo:
    return ReceiverInfo(
        name=receiver.name,
        kind=receiver.kind,
        url=shown_url(receiver),
        has_secret=bool(receiver.secret),
        events=list(receiver.events),
        project=receiver.project,
        source=receiver.source,
        created_by=receiver.created_by,
        created_at=receiver.created_at,
    )


def build_notifications_router() -> APIRouter:
    router = APIRouter(tags=["notifications"])

    @router.post(f"{RECEIVERS}/add", response_model=ReceiverInfo)
    async def add_receiver(
        body: ReceiverAdd, request: Request, admin: Principal = Depends(require_admin)
    ) -> ReceiverInfo:
        receiver = check_receiver(
            Receiver(
                name=body.name,
                kind=body.kind,
                url=body.url,
                secret=body.secret,
                events=tuple(body.events),
                project=body.project,
                source=body.source,
            )
        )
        store = _store(request)
        added = await anyio.to_thread.run_sync(store.add_receiver, receiver, admin.username)
        return _info(added)

    @router.post(f"{RECEIVERS}/list", response_model=list[ReceiverInfo])
    async def list_receivers(
        request: Request, _: Principal = Depends(require_admin)
    ) -> list[ReceiverInfo]:
        receivers = await anyio.to_thread.run_sync(_store(request).list_receivers)
        return [_info(r) for r in receivers]

    @router.post(f"{RECEIVERS}/delete")
    async def delete_receiver(
        body: ReceiverName, request: Request, _: Principal = Depends(require_admin)
    ) -> dict[str, str]:
        if not await anyio.to_thread.run_sync(_store(request).delete_receiver, body.name):
            raise NotFoundError(f"receiver {body.name} not found")
        return {"deleted": body.name}

    @router.post(DELIVERIES, response_model=list[NotificationInfo])
    async def list_notifications(
        body: DeliveriesRequest, request: Request, user: Principal = Depends(require_user)
    ) -> list[NotificationInfo]:
        store = _store(request)
        views = await anyio.to_thread.run_sync(
            lambda: store.list_deliveries(
                viewer=None if user.is_admin else user.user_id,
                limit=body.limit,
                project=body.project,
            )
        )
        return [NotificationInfo(**asdict(v)) for v in views]

    return router
