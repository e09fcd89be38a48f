"""The console's routes: sign-in and out, projects, a project's GitOps timeline, a commit's
plan. Runs live in `runpages`, capacity and settings in `capacitypages`, sources in
`sourcepages`; all are added to the router `build_console_router` returns (called by
`reconciler.web.app`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response

from reconciler.adapters.db.readmodels.accounts import list_projects
from reconciler.adapters.db.readmodels.project import get_reconcile, list_reconciles
from reconciler.web.auth import find_principal, hash_token
from reconciler.web.console.access import project_of
from reconciler.web.console.capacitypages import add_capacity_pages
from reconciler.web.console.origins import secure_cookie, sign_in_refusal
from reconciler.web.console.rendering import SECURITY_HEADERS
from reconciler.web.console.runpages import add_run_pages, project_costs
from reconciler.web.console.sessions import COOKIE, COOKIE_PATH
from reconciler.web.console.sourcepages import add_source_pages
from reconciler.web.console.state import Console
from reconciler.web.console.static import add_static_routes
from reconciler.web.context import WebContext, get_context


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only (no open redirect)."""
    if target and target.startswith("/console/") and "//" not in target and "\\" not in target:
        return target
    return "/console/"


def build_console_router(data_dir: Path) -> APIRouter:
    console = Console(data_dir)
    router = APIRouter(include_in_schema=False)
    _add_sign_in(router, console)
    _add_project_pages(router, console)
    add_run_pages(router, console)
    add_capacity_pages(router, console)
    add_source_pages(router, console)
    add_static_routes(router)
    return router


def _add_sign_in(router: APIRouter, console: Console) -> None:
    @router.get("/")
    async def root() -> Response:
        return RedirectResponse("/console/", status_code=303, headers=SECURITY_HEADERS)

    @router.get("/console/login")
    async def login_form(next: str | None = None) -> Response:
        return console.page("login.html", None, next=safe_next(next), error=None)

    @router.post("/console/login")
    async def login(request: Request, context: WebContext = Depends(get_context)) -> Response:
        external_url = context.settings.external_url
        refused = sign_in_refusal(
            origin=request.headers.get("origin"),
            fetch_site=request.headers.get("sec-fetch-site"),
            host=request.headers.get("host"),
            external_url=external_url,
        )
        if refused is not None:  # before the form is read: a cross-site post learns nothing
            return console.page("login.html", None, 403, next="/console/", error=refused)
        form = await console.form(request)
        token, target = form.get("token", "").strip(), safe_next(form.get("next"))
        digest = hash_token(token) if 0 < len(token) <= 512 else ""
        principal = await context.db.read(find_principal, digest) if digest else None
        if principal is None:
            return console.page("login.html", None, 401, next=target, error="invalid token")
        session = console.signer.issue(digest, context.clock.now_ts())
        answer = RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
        answer.set_cookie(
            COOKIE,
            session.value,
            max_age=int(console.signer.lifetime),
            path=COOKIE_PATH,
            httponly=True,
            samesite="strict",
            secure=secure_cookie(request.url.scheme, external_url),
        )
        return answer

    @router.post("/console/logout")
    async def logout(request: Request, context: WebContext = Depends(get_context)) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            console.check_csrf(viewer, await console.form(request))
            answer = RedirectResponse("/console/login", status_code=303, headers=SECURITY_HEADERS)
            answer.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
            return answer

        return await console.guard(request, body)


def _add_project_pages(router: APIRouter, console: Console) -> None:
    @router.get("/console/")
    async def projects(request: Request, context: WebContext = Depends(get_context)) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            found = await context.db.read(list_projects, viewer.principal)
            return console.page("projects.html", viewer, projects=found)

        return await console.guard(request, body)

    @router.get("/console/p/{project}")
    async def overview(
        project: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            found = await context.db.read(list_reconciles, access.project_id, project, 50)
            costs = await project_costs(context, access)
            return console.page(
                "project.html",
                viewer,
                project=project,
                reconciles=found,
                costs=costs,
                timeline=[timeline_row(r) for r in found],
            )

        return await console.guard(request, body)

    @router.post("/console/p/{project}/reconcile")
    async def reconcile(
        project: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            console.check_csrf(viewer, await console.form(request))
            await project_of(context, viewer, project)  # the API's trigger: role user
            await context.controller.request_reconcile(project, trigger="api")
            target = f"/console/p/{project}"
            return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)

        return await console.guard(request, body)

    @router.get("/console/p/{project}/reconciles/{reconcile_id}")
    async def plan(
        project: str,
        reconcile_id: str,
        request: Request,
        context: WebContext = Depends(get_context),
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            found = await context.db.read(get_reconcile, access.project_id, project, reconcile_id)
            plan = found.plan if isinstance(found.plan, dict) else {}
            return console.page(
                "reconcile.html",
                viewer,
                project=project,
                reconcile=found,
                row=timeline_row(found),
                actions=plan_rows(plan),
            )

        return await console.guard(request, body)


def timeline_row(reconcile: Any) -> dict[str, Any]:
    """One commit of the timeline: counts of the plan's actions and the stage timings."""
    plan = reconcile.plan if isinstance(reconcile.plan, dict) else {}
    counts: dict[str, int] = {}
    for action in plan.get("actions") or ():
        if isinstance(action, dict):
            kind = str(action.get("action"))
            counts[kind] = counts.get(kind, 0) + 1
    timings = reconcile.stage_timings if isinstance(reconcile.stage_timings, dict) else {}
    outcome = reconcile.outcome if isinstance(reconcile.outcome, dict) else {}
    return {
        "counts": ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if k != "noop")
        or "no changes",
        "timings": ", ".join(
            f"{k} {float(v):.2f} s" for k, v in timings.items() if isinstance(v, int | float)
        ),
        "summary": str(outcome.get("summary") or ""),
        "pull_request": plan.get("pull_request")
        if isinstance(plan.get("pull_request"), dict)
        else None,
    }


def plan_rows(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's actions with their fields as (field, before, after), for the side-by-side
    diff."""
    rows = []
    for action in plan.get("actions") or ():
        if not isinstance(action, dict):
            continue
        fields = [
            (str(f.get("field")), _shown(f.get("old")), _shown(f.get("new")))
            for f in action.get("fields") or ()
            if isinstance(f, dict)
        ]
        rows.append(
            {
                **{k: action.get(k) for k in ("action", "kind", "name", "path", "reason")},
                "fields": fields,
            }
        )
    return rows


def _shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
