"""Who is looking at the console, and what they may see: the API's rules, from a cookie.

`viewer_of` turns the session cookie into the API's `Principal` (looked up again on every
request by the token hash the session holds); `project_of` asks the API's own check
(`reconciler.web.auth.check_project_access`) and raises `DeniedError` with the status to answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import HTTPException, Request

from reconciler.web.auth import Principal, ProjectAccess, Role, check_project_access, find_principal
from reconciler.web.console.sessions import COOKIE, Session, SessionSigner
from reconciler.web.context import WebContext
from reconciler.web.errors import NotFoundError


class DeniedError(Exception):
    """The viewer may not see this: `status` is 401 (no session), 403 or 404."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Viewer:
    principal: Principal
    session: Session
    csrf: str


async def viewer_of(request: Request, context: WebContext, signer: SessionSigner) -> Viewer:
    value = request.cookies.get(COOKIE, "")
    session = signer.verify(value, context.clock.now_ts()) if value else None
    if session is None:
        raise DeniedError(401, "sign in with your Dockyard token")
    principal = await context.db.read(find_principal, session.token_hash)
    if principal is None:
        raise DeniedError(401, "this session's token is no longer valid: sign in again")
    return Viewer(principal, session, signer.csrf(session))


async def project_of(
    context: WebContext, viewer: Viewer, project: str, min_role: Role = "user"
) -> ProjectAccess:
    try:
        return await check_project_access(context, viewer.principal, project, min_role)
    except HTTPException as error:
        raise DeniedError(error.status_code, str(error.detail)) from None
    except NotFoundError as error:
        raise DeniedError(404, str(error)) from None
