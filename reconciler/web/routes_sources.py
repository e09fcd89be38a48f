"""`POST /api/sources/{list,get,create,update,delete,suspend,resume}`: the config repos the
server follows (docs/sources.md).

Global admins add, change, delete, suspend and resume sources; `list` and `get` answer
everyone, with the sources of the projects the caller is a member of only (a source of
another project is "not found", as one that does not exist, so names do not leak).
A source's secrets are references (`env:NAME`, `file:PATH`): the body is checked here
(`core.sources.SourceSpec`) so a refused value is never echoed back in the error, and
only the reference is ever shown. After a change the controller follows the sources
again at once (`sources_changed`; other replicas within their resync). `dockyard source`
calls these routes (`reconciler.cli.sources`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import Field, ValidationError

from reconciler.api.requests import Body
from reconciler.core.sources import SourceSpec, source_to_dict
from reconciler.domain.sources import Source
from reconciler.errors import DockyardError
from reconciler.web.auth import Principal, require_admin, require_user
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import NotFoundError
from reconciler.web.hookrouting import sources_store
from reconciler.web.sourcereads import (
    shown_source,
    visible_projects,
    visible_sources,
    with_state,
)


class SourceName(Body):
    name: str = Field(min_length=1, max_length=100)


class SourcesQuery(Body):
    project: str | None = Field(default=None, max_length=100)


class SourceBody(Body):
    """A source as posted: loose here, checked by `SourceSpec` without echoing values."""

    name: Any = None
    repo: Any = None
    project: Any = None
    branch: Any = None
    paths: Any = None
    fetch_interval: Any = None
    suspended: Any = None
    webhook_secret: Any = None
    credentials: Any = None


def _spec(body: SourceBody, name: str | None = None) -> SourceSpec:
    values = {k: v for k, v in body.model_dump().items() if v is not None}
    if name is not None:
        values["name"] = name
    try:
        return SourceSpec.model_validate(values)
    except ValidationError as exc:
        lines = [
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise HTTPException(status_code=400, detail="; ".join(lines)) from None


async def _changed(context: WebContext) -> None:
    follow = getattr(context.controller, "sources_changed", None)
    if follow is not None:
        await follow()


def build_sources_router() -> APIRouter:
    router = APIRouter(prefix="/api/sources", tags=["sources"])

    @router.post("/list")
    async def list_sources(
        request: Request,
        body: SourcesQuery | None = None,
        me: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> list[dict[str, Any]]:
        project = body.project if body is not None else None
        return await visible_sources(request, context, me, project)

    @router.post("/get")
    async def get_source(
        request: Request,
        body: SourceName,
        me: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        found = await anyio.to_thread.run_sync(
            sources_store(request, context).get_source, body.name
        )
        visible = await visible_projects(context, me)
        if found is None or (visible is not None and found.project not in visible):
            raise NotFoundError(f"no source named {body.name!r}")
        return (await with_state(request, context, [found]))[0]

    @router.post("/create")
    async def create_source(
        request: Request,
        body: SourceBody,
        _: Principal = Depends(require_admin),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        source = _spec(body).to_source("api")
        added = await anyio.to_thread.run_sync(sources_store(request, context).add_source, source)
        await _changed(context)
        return shown_source(added)

    @router.post("/update")
    async def update_source(
        request: Request,
        body: SourceBody,
        _: Principal = Depends(require_admin),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        """Change an `api` source: the fields given replace the stored ones."""
        store = sources_store(request, context)
        name = body.name if isinstance(body.name, str) else ""
        current = await anyio.to_thread.run_sync(store.get_source, name)
        if current is None:
            raise NotFoundError(f"no source named {name!r}")
        merged = SourceBody.model_validate(
            {**_as_body(current), **{k: v for k, v in body.model_dump().items() if v is not None}}
        )
        changed = _spec(merged, name).to_source("api")
        updated = await anyio.to_thread.run_sync(store.update_source, name, changed)
        await _changed(context)
        return shown_source(updated)

    @router.post("/delete")
    async def delete_source(
        request: Request,
        body: SourceName,
        _: Principal = Depends(require_admin),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        gone = await anyio.to_thread.run_sync(
            sources_store(request, context).delete_source, body.name
        )
        await _changed(context)
        return {"deleted": gone.name}

    for verb, suspended in (("suspend", True), ("resume", False)):
        _add_suspension(router, verb, suspended)
    return router


def _add_suspension(router: APIRouter, verb: str, suspended: bool) -> None:
    async def set_suspended(
        request: Request,
        body: SourceName,
        _: Principal = Depends(require_admin),
        context: WebContext = Depends(get_context),
    ) -> dict[str, Any]:
        store = sources_store(request, context)
        changed = await anyio.to_thread.run_sync(store.set_source_suspended, body.name, suspended)
        await _changed(context)
        if not suspended:  # resumed: the next pass applies the branch head, now
            with contextlib.suppress(DockyardError):
                await context.controller.request_reconcile(changed.project, trigger="api")
        return shown_source(changed)

    router.add_api_route(f"/{verb}", set_suspended, methods=["POST"], name=f"{verb}_source")


def _as_body(source: Source) -> dict[str, Any]:
    shown = source_to_dict(source)
    return {k: v for k, v in shown.items() if k != "origin"}
