"""The app factory: `create_app(...)` wires one FastAPI app from what it is given.

There is no global app. The composition root (`reconciler.app`) and the tests call
`create_app` with a `Settings`, a `Database`, a `Controller`, the secrets cipher and a clock;
the app mounts the service proxy (`reconciler.web.proxy.ServiceProxy`, built by the
composition root) at `/proxy/services` and starts the controller when it starts serving
and stops it on shutdown (jobs keep running on their hosts). Routes: `/healthcheck` and
the webhooks are open; everything else under `/api/` needs a bearer token; `/metrics`
needs a global admin's token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.diskspace import DiskWatch
from reconciler.adapters.db.readmodels.database import Database
from reconciler.ports import Clock, Controller
from reconciler.pr.bot import PullRequestBot
from reconciler.settings import Settings
from reconciler.web.auth import Principal, require_admin, require_user
from reconciler.web.console.pages import build_console_router
from reconciler.web.context import SecretBox, WebContext, get_context
from reconciler.web.errors import ErrorShield, install_error_handlers
from reconciler.web.forwarding import OpenTunnel, build_forward_router
from reconciler.web.gate import TokenGate
from reconciler.web.metrics import Metrics, RequestTotals
from reconciler.web.pages import build_pages_router
from reconciler.web.routes_backends import build_backends_router
from reconciler.web.routes_capacity import build_capacity_router
from reconciler.web.routes_core import SERVER_VERSION, build_core_router
from reconciler.web.routes_dstack import build_dstack_global_router, build_dstack_project_router
from reconciler.web.routes_files import build_files_router
from reconciler.web.routes_logs import build_logs_router
from reconciler.web.routes_notifications import build_notifications_router
from reconciler.web.routes_pr import build_pr_router
from reconciler.web.routes_project import build_deliveries_router, build_project_router
from reconciler.web.routes_runs import build_global_runs_router, build_runs_router
from reconciler.web.routes_sources import build_sources_router
from reconciler.web.webhooks import build_webhooks_router


def server_disk(settings: Settings) -> DiskWatch:
    """The server's data dir against `min_free_disk` (docs/operations.md)."""
    return DiskWatch({"data dir": settings.data_dir}, settings.min_free_disk)


def _build_ops_router() -> APIRouter:
    router = APIRouter()

    @router.get("/healthcheck", tags=["server"])
    async def healthcheck(context: WebContext = Depends(get_context)) -> dict[str, Any]:
        disk = await anyio.to_thread.run_sync(server_disk(context.settings).check)
        return {
            "status": "disk_low" if disk.low else "ok",
            "service": "dockyard",
            "version": SERVER_VERSION,
            "disk": {"free": dict(disk.free), "min_free": disk.min_free, "problem": disk.problem},
        }

    @router.get("/metrics", tags=["server"], response_class=Response)
    async def metrics(
        _: Principal = Depends(require_admin), context: WebContext = Depends(get_context)
    ) -> Response:
        body = await anyio.to_thread.run_sync(context.metrics.render)
        return Response(content=body, media_type="text/plain; version=0.0.4; charset=utf-8")

    return router


def _add_openapi_route(app: FastAPI) -> None:
    """The OpenAPI document at `/openapi.json`, for token holders like every other route."""

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(_: Principal = Depends(require_user)) -> dict[str, Any]:
        return app.openapi()


def _lifespan(
    controller: Controller, start: bool, proxy: ASGIApp | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the controller when serving begins, stop it (jobs keep running) at shutdown,
    and close the proxy's upstream connections."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start:
            await controller.start()
        previews = getattr(app.state, "preview_runs", None)  # reconciler.pr.previews
        if start and previews is not None:
            await previews.start()
        notifier = getattr(app.state, "notifier", None)  # reconciler.engine.notifier
        if start and notifier is not None:
            notifier.start()
        try:
            yield
        finally:
            if start and notifier is not None:
                await notifier.stop()
            if start and previews is not None:
                await previews.stop()
            if start:
                await controller.stop()
            close = getattr(proxy, "aclose", None)
            if close is not None:
                await close()

    return lifespan


def create_app(
    *,
    settings: Settings,
    db: Database,
    controller: Controller,
    secrets: SecretBox,
    clock: Clock,
    proxy: ASGIApp | None = None,
    request_stats: RequestTotals | None = None,
    open_tunnel: OpenTunnel | None = None,
    start_controller: bool = True,
    pull_requests: PullRequestBot | None = None,
) -> FastAPI:
    context = WebContext(
        settings=settings,
        db=db,
        controller=controller,
        metrics=Metrics(db, services=request_stats, disk=server_disk(settings)),
        secrets=secrets,
        clock=clock,
    )

    app = FastAPI(
        title="Dockyard",
        version=SERVER_VERSION,
        description="GitOps for GPU workloads: the REST API of the Dockyard server.",
        lifespan=_lifespan(controller, start_controller, proxy),
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.context = context
    app.state.pull_requests = pull_requests  # reconciler.pr.bot: PR plans, statuses, pages
    install_error_handlers(app)
    app.add_middleware(TokenGate, context=context)
    app.add_middleware(ErrorShield)  # added last: the outermost of ours
    if proxy is not None:
        # First in the route table: Starlette tries routes in order, so service traffic
        # does not pay for matching every API route before reaching the proxy.
        app.mount("/proxy/services", proxy)
    for router in (
        _build_ops_router(),
        build_core_router(),
        build_runs_router(),
        build_global_runs_router(),
        build_capacity_router(),
        build_logs_router(),
        build_project_router(),
        build_backends_router(),
        build_sources_router(),
        build_deliveries_router(),
        build_notifications_router(),
        build_webhooks_router(),
        build_forward_router(open_tunnel),
        build_files_router(),
        build_dstack_project_router(),
        build_dstack_global_router(),
        build_pr_router(),
        build_pages_router(),
        build_console_router(settings.data_dir),
    ):
        app.include_router(router)
    _add_openapi_route(app)
    return app


class ProxyFirst:
    """The served ASGI app: `/proxy/services/…` goes straight to the service proxy (behind
    `ErrorShield`), everything else to the API app.

    The API app mounts the same proxy, but there service traffic would cross FastAPI's
    middleware stack and route table first, ~40% of the proxy's CPU per request. The
    proxy checks its own bearer tokens, so nothing of the API's gate is skipped.
    """

    def __init__(self, app: ASGIApp, proxy: ASGIApp) -> None:
        self.app = app
        self.proxy = ErrorShield(proxy)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"].startswith("/proxy/services/"):
            await self.proxy(scope, receive, send)
        else:
            await self.app(scope, receive, send)
