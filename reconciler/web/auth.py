"""Bearer-token authentication and project authorization (roles admin > manager > user).

Tokens are random strings handed out once; the database keeps only their sha256 hex
(`hash_token`). `require_user` resolves the `Authorization: Bearer` header to a
`Principal`; `project_access(min_role)` builds the dependency of every
`/api/project/{project_name}/…` route: global admins may act on any project, everyone else
only where they are a member with at least `min_role`. A non-member gets the same 403 for a
project that exists and one that does not, so project names do not leak.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import Depends, HTTPException, Request

from reconciler.adapters.db.accounts import hash_token as hash_token
from reconciler.adapters.db.accounts import new_token as new_token
from reconciler.adapters.db.readmodels.accounts import find_membership as find_membership
from reconciler.adapters.db.readmodels.accounts import find_principal as find_principal
from reconciler.adapters.db.readmodels.database import Database
from reconciler.domain.principals import Principal as Principal
from reconciler.web.context import WebContext, get_context
from reconciler.web.errors import NotFoundError

Role = Literal["user", "manager", "admin"]
_RANK: dict[str, int] = {"user": 0, "manager": 1, "admin": 2}


@dataclass(frozen=True, slots=True)
class ProjectAccess:
    principal: Principal
    project_id: str
    project_name: str
    role: str

    def has_role(self, role: Role) -> bool:
        return _RANK.get(self.role, -1) >= _RANK[role]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


async def authenticate(context: WebContext, header: str) -> Principal:
    """The principal of an `Authorization` header value, or a 401 `HTTPException`."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    principal = await context.db.read(find_principal, hash_token(token.strip()))
    if principal is None:
        raise _unauthorized("invalid token")
    return principal


async def require_user(request: Request, context: WebContext = Depends(get_context)) -> Principal:
    """The caller (already checked by `TokenGate`, which leaves it on `request.state`)."""
    known = getattr(request.state, "principal", None)
    if isinstance(known, Principal):
        return known
    return await authenticate(context, request.headers.get("authorization", ""))


async def require_admin(principal: Principal = Depends(require_user)) -> Principal:
    if not principal.is_admin:
        raise HTTPException(status_code=403, detail="only a global admin may do this")
    return principal


async def check_project_access(
    context: WebContext, principal: Principal, project_name: str, min_role: Role = "user"
) -> ProjectAccess:
    """The caller's access to a project: an admin reaches every project, a member only
    theirs, with at least `min_role`; else 403 (404 for an admin and no such project).
    The API's dependency and the web console both decide here."""
    project_id, role = await context.db.read(find_membership, project_name, principal.user_id)
    if principal.is_admin:
        if not project_id:
            raise NotFoundError(f"project {project_name} not found")
        return ProjectAccess(principal, project_id, project_name, "admin")
    if not project_id or role is None:
        raise HTTPException(status_code=403, detail=f"no access to project {project_name}")
    if _RANK.get(role, -1) < _RANK[min_role]:
        raise HTTPException(
            status_code=403,
            detail=f"role {role} in project {project_name} may not do this; "
            f"it needs {min_role} or higher",
        )
    return ProjectAccess(principal, project_id, project_name, role)


def project_access(min_role: Role = "user") -> Callable[..., Awaitable[ProjectAccess]]:
    """The dependency checking the caller's role in the path's `{project_name}`."""

    async def dependency(
        project_name: str,
        principal: Principal = Depends(require_user),
        context: WebContext = Depends(get_context),
    ) -> ProjectAccess:
        return await check_project_access(context, principal, project_name, min_role)

    return dependency


def token_authorizer(
    db: Database, *, ttl: float = 5.0, clock: Callable[[], float] = time.monotonic
) -> Callable[[str, str | None], Awaitable[bool]]:
    """`authorize(project, token)` for the service proxy: a member's (or an admin's) token.

    Answers are remembered for `ttl` seconds per (project, token hash), so a busy service
    costs the database one lookup per client every few seconds, not two per request; a
    revoked token or a removed member stops passing within `ttl`.
    """
    remembered: dict[tuple[str, str], tuple[float, bool]] = {}

    async def lookup(project: str, digest: str) -> bool:
        principal = await db.read(find_principal, digest)
        if principal is None:
            return False
        if principal.is_admin:
            return True
        _, role = await db.read(find_membership, project, principal.user_id)
        return role is not None

    async def authorize(project: str, token: str | None) -> bool:
        if not token:
            return False
        key = (project, hash_token(token))
        now = clock()
        known = remembered.get(key)
        if known is not None and now - known[0] < ttl:
            return known[1]
        allowed = await lookup(*key)
        if len(remembered) >= 10_000:  # bounded: a flood of bad tokens cannot grow it
            remembered.clear()
        remembered[key] = (now, allowed)
        return allowed

    return authorize


def token_recogniser(
    db: Database, *, ttl: float = 5.0, clock: Callable[[], float] = time.monotonic
) -> Callable[[str], Awaitable[bool]]:
    """`is_dockyard_token(token)` for the service proxy: whether a bearer token is any
    user's Dockyard token, which no service may see (`auth: false` services included).
    Remembered for `ttl` seconds per token hash, at most 10,000 at a time."""
    remembered: dict[str, tuple[float, bool]] = {}

    async def recognise(token: str) -> bool:
        digest, now = hash_token(token), clock()
        known = remembered.get(digest)
        if known is not None and now - known[0] < ttl:
            return known[1]
        found = await db.read(find_principal, digest) is not None
        if len(remembered) >= 10_000:
            remembered.clear()
        remembered[digest] = (now, found)
        return found

    return recognise
