"""Core routes (dstack's shapes): server info, users and tokens, projects and members.

Users are managed by global admins; any user may create a project (and becomes its admin);
project admins and managers manage its members.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from fastapi import APIRouter, Depends, HTTPException, Request

from reconciler.adapters.db.readmodels import accounts as q
from reconciler.api import models as wire
from reconciler.api import requests as req
from reconciler.domain.memberships import MembershipRefusedError
from reconciler.web.auth import (
    Principal,
    ProjectAccess,
    project_access,
    require_admin,
    require_user,
)
from reconciler.web.context import WebContext, get_context
from reconciler.web.dstack_attach import caller_key_pair, sync_user_keys
from reconciler.web.errors import InvalidError, NotFoundError

SERVER_VERSION = "0.1.0"


def redact_repo(repo: str | None) -> str | None:
    """The repo URL without credentials (`https://user:token@host/…` → `https://host/…`)."""
    if repo is None or "@" not in repo or "://" not in repo:
        return repo
    scheme, rest = repo.split("://", 1)
    return f"{scheme}://{rest.split('@', 1)[1]}"


def _now(context: WebContext) -> datetime:
    return datetime.fromtimestamp(context.clock.now_ts(), UTC)


def build_core_router() -> APIRouter:
    router = APIRouter(prefix="/api")
    _add_server_routes(router)
    _add_user_routes(router)
    _add_project_routes(router)
    return router


def _add_server_routes(router: APIRouter) -> None:
    @router.post("/server/get_info", response_model=wire.ServerInfo, tags=["server"])
    async def get_info(
        me: Principal = Depends(require_user), context: WebContext = Depends(get_context)
    ) -> wire.ServerInfo:
        s = context.settings
        if not me.is_admin:
            return wire.ServerInfo(server_version=SERVER_VERSION)
        return wire.ServerInfo(
            server_version=SERVER_VERSION,
            project=s.project,
            repo=redact_repo(s.repo),
            branch=s.branch,
        )


def _add_user_routes(router: APIRouter) -> None:
    @router.post("/users/list", response_model=list[wire.User], tags=["users"])
    async def list_users(
        _: Principal = Depends(require_admin), context: WebContext = Depends(get_context)
    ) -> list[wire.User]:
        return await context.db.read(q.list_users)

    @router.post("/users/get_my_user", response_model=wire.UserWithToken, tags=["users"])
    async def get_my_user(
        request: Request,
        me: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> wire.UserWithToken:
        """The caller, with the token it called with (dstack's `UserWithCreds`)."""
        user = await context.db.read(q.get_user, me.user_id)
        token = request.headers.get("authorization", "").partition(" ")[2].strip()
        pair = await caller_key_pair(context, me)
        return wire.with_token(user, token).model_copy(
            update={"ssh_public_key": pair.public_key, "ssh_private_key": pair.private_key}
        )

    @router.post("/users/get_user", response_model=wire.User, tags=["users"])
    async def get_user(
        body: req.UsernameRequest,
        me: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> wire.User:
        """A user by name: global admins see anyone, a user sees only themself."""
        if not me.is_admin and body.username != me.username:
            raise NotFoundError(f"user {body.username} not found")
        return await context.db.read(q.get_user_by_name, body.username)

    @router.post("/users/create", response_model=wire.UserWithToken, tags=["users"])
    async def create_user(
        body: req.CreateUserRequest,
        _: Principal = Depends(require_admin),
        context: WebContext = Depends(get_context),
    ) -> wire.UserWithToken:
        return await context.db.write(q.create_user, body.username, body.global_role, _now(context))

    @router.post("/users/refresh_token", response_model=wire.UserWithToken, tags=["users"])
    async def refresh_token(
        body: req.UsernameRequest,
        _: Principal = Depends(require_admin),
        context: WebContext = Depends(get_context),
    ) -> wire.UserWithToken:
        return await context.db.write(q.refresh_token, body.username, _now(context))

    @router.post("/users/delete", tags=["users"])
    async def delete_user(
        body: req.UsernameRequest,
        me: Principal = Depends(require_admin),
        context: WebContext = Depends(get_context),
    ) -> dict[str, str]:
        await context.db.write(q.delete_user, body.username, me)
        await sync_user_keys(context)
        return {"deleted": body.username}


def _add_project_routes(router: APIRouter) -> None:
    @router.post("/projects/list", response_model=list[wire.Project], tags=["projects"])
    async def list_projects(
        me: Principal = Depends(require_user), context: WebContext = Depends(get_context)
    ) -> list[wire.Project]:
        return await context.db.read(q.list_projects, me)

    @router.post("/projects/create", response_model=wire.Project, tags=["projects"])
    async def create_project(
        body: req.CreateProjectRequest,
        me: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> wire.Project:
        return await context.db.write(
            q.create_project, body.project_name, me.user_id, _now(context)
        )

    @router.post("/projects/{project_name}/get", response_model=wire.Project, tags=["projects"])
    async def get_project(
        access: ProjectAccess = Depends(project_access("user")),
        context: WebContext = Depends(get_context),
    ) -> wire.Project:
        return await context.db.read(q.get_project, access.project_id)

    @router.post("/projects/{project_name}/delete", tags=["projects"])
    async def delete_project(
        access: ProjectAccess = Depends(project_access("admin")),
        context: WebContext = Depends(get_context),
    ) -> dict[str, str]:
        hosts = await context.db.write(q.delete_project, access.project_name, _now(context))
        await sync_user_keys(context)
        if hosts:  # its jobs stop and its users leave the hosts' key files (no SSH here)
            context.controller.hint("teardowns")
        return {"deleted": access.project_name}

    _add_member_routes(router)


def _add_member_routes(router: APIRouter) -> None:
    @router.post(
        "/projects/{project_name}/set_members", response_model=wire.Project, tags=["projects"]
    )
    async def set_members(
        body: req.MembersRequest,
        access: ProjectAccess = Depends(project_access("manager")),
        context: WebContext = Depends(get_context),
    ) -> wire.Project:
        project = await _write_members(context, q.set_members, access, _members(body), replace=True)
        await sync_user_keys(context)
        return project

    @router.post(
        "/projects/{project_name}/add_members", response_model=wire.Project, tags=["projects"]
    )
    async def add_members(
        body: req.MembersRequest,
        access: ProjectAccess = Depends(project_access("manager")),
        context: WebContext = Depends(get_context),
    ) -> wire.Project:
        project = await _write_members(
            context, q.set_members, access, _members(body), replace=False
        )
        await sync_user_keys(context)
        return project

    @router.post(
        "/projects/{project_name}/remove_members", response_model=wire.Project, tags=["projects"]
    )
    async def remove_members(
        body: req.RemoveMembersRequest,
        access: ProjectAccess = Depends(project_access("manager")),
        context: WebContext = Depends(get_context),
    ) -> wire.Project:
        project = await _write_members(context, q.remove_members, access, body.usernames)
        await sync_user_keys(context)
        return project


def _members(body: req.MembersRequest) -> dict[str, str]:
    """`username: role`; a name listed twice is a mistake (dstack refuses it too)."""
    members = {m.username: m.project_role for m in body.members}
    if len(members) != len(body.members):
        raise InvalidError("a user is listed more than once: list each member once")
    return members


async def _write_members(
    context: WebContext,
    write: Callable[..., wire.Project],
    access: ProjectAccess,
    *args: object,
    **kwargs: object,
) -> wire.Project:
    """Run a member write with the caller's right over admins (only a project admin or a
    global admin has it; `membership_refusal` decides in the write's transaction): a
    refusal is 403 when the caller's role may not do it, 400 when nobody may."""
    may = access.has_role("admin")
    try:
        return await context.db.write(
            write, access.project_id, *args, may_change_admins=may, **kwargs
        )
    except MembershipRefusedError as exc:
        if exc.refusal.forbidden:
            raise HTTPException(status_code=403, detail=exc.refusal.message) from exc
        raise InvalidError(exc.refusal.message) from exc
