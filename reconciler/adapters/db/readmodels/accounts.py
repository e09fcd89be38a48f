"""Users, tokens, projects and members: the reads and writes behind the core routes.

Every function takes an open `Session` first (see `Database`) and returns wire models.
Tokens are returned in plain text only when made (`create_user`, `refresh_token`); the
database keeps their hash.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from reconciler.adapters.db.accounts import hash_token, member_roles, new_token
from reconciler.adapters.db.models import Member, Project, Token, User
from reconciler.adapters.db.teardowns import record_teardowns
from reconciler.api import models as wire
from reconciler.domain.memberships import MembershipRefusedError, membership_refusal
from reconciler.domain.principals import Principal
from reconciler.errors import ConflictError, InvalidError, NotFoundError


def to_user(row: User) -> wire.User:
    return wire.User(
        id=row.id, username=row.name, global_role=row.global_role, created_at=row.created_at
    )


def _user_by_name(session: Session, username: str) -> User:
    row = session.scalar(select(User).where(User.name == username))
    if row is None:
        raise NotFoundError(f"user {username} not found")
    return row


def _project_by_name(session: Session, name: str) -> Project:
    row = session.scalar(select(Project).where(Project.name == name))
    if row is None:
        raise NotFoundError(f"project {name} not found")
    return row


def list_users(session: Session) -> list[wire.User]:
    return [to_user(row) for row in session.scalars(select(User).order_by(User.name))]


def get_user(session: Session, user_id: str) -> wire.User:
    row = session.get(User, user_id)
    if row is None:
        raise NotFoundError("user not found")
    return to_user(row)


def get_user_by_name(session: Session, username: str) -> wire.User:
    return to_user(_user_by_name(session, username))


def issue_token(session: Session, user_id: str, now: datetime) -> str:
    token = new_token()
    session.add(Token(user_id=user_id, token_hash=hash_token(token), created_at=now))
    return token


def create_user(
    session: Session, username: str, global_role: str, now: datetime
) -> wire.UserWithToken:
    if session.scalar(select(User.id).where(User.name == username)) is not None:
        raise ConflictError(f"user {username} already exists")
    row = User(name=username, global_role=global_role, created_at=now)
    session.add(row)
    session.flush()
    return wire.with_token(to_user(row), issue_token(session, row.id, now))


def refresh_token(session: Session, username: str, now: datetime) -> wire.UserWithToken:
    row = _user_by_name(session, username)
    session.execute(delete(Token).where(Token.user_id == row.id))
    return wire.with_token(to_user(row), issue_token(session, row.id, now))


def delete_user(session: Session, username: str, caller: Principal) -> None:
    """Delete the user, their tokens and memberships; refused (400, nothing written) when
    it would leave a project without an admin (dstack's rule, `membership_refusal`)."""
    row = _user_by_name(session, username)
    if row.id == caller.user_id:
        raise InvalidError("you cannot delete yourself")
    projects = session.execute(
        select(Project.id, Project.name)
        .join(Member, Member.project_id == Project.id)
        .where(Member.user_id == row.id)
        .order_by(Project.name)
    ).all()
    for project_id, project_name in projects:
        before = member_roles(session, project_id)
        after = {name: role for name, role in before.items() if name != username}
        refusal = membership_refusal(before, after, caller_may_change_admins=True)
        if refusal is not None:
            raise InvalidError(
                f"user {username} cannot be deleted: in project {project_name}, {refusal.message}"
            )
    session.execute(delete(Token).where(Token.user_id == row.id))
    session.execute(delete(Member).where(Member.user_id == row.id))
    session.delete(row)


def get_project(session: Session, project_id: str) -> wire.Project:
    row = session.get(Project, project_id)
    if row is None:
        raise NotFoundError("project not found")
    members = session.execute(
        select(User, Member.role)
        .join(Member, Member.user_id == User.id)
        .where(Member.project_id == row.id)
        .order_by(User.name)
    ).all()
    listed = [
        wire.Member(
            user=to_user(user), project_role=role, permissions=wire.member_permissions(role)
        )
        for user, role in members
    ]
    admins = [m.user for m in listed if m.project_role == "admin"] or [m.user for m in listed]
    return wire.Project(
        project_id=row.id,
        project_name=row.name,
        created_at=row.created_at,
        owner=admins[0] if admins else None,
        members=listed,
    )


def list_projects(session: Session, caller: Principal) -> list[wire.Project]:
    query = select(Project.id).order_by(Project.name)
    if not caller.is_admin:
        query = query.join(Member, Member.project_id == Project.id).where(
            Member.user_id == caller.user_id
        )
    return [get_project(session, project_id) for project_id in session.scalars(query)]


def create_project(session: Session, name: str, owner_id: str, now: datetime) -> wire.Project:
    if session.scalar(select(Project.id).where(Project.name == name)) is not None:
        raise ConflictError(f"project {name} already exists")
    row = Project(name=name, created_at=now)
    session.add(row)
    session.flush()
    session.add(Member(project_id=row.id, user_id=owner_id, role="admin"))
    session.flush()
    return get_project(session, row.id)


def delete_project(session: Session, name: str, now: datetime) -> int:
    """Delete the project (its runs, jobs, fleets and instances go with it) and, in the same
    transaction, record what it leaves on its hosts (`teardowns.record_teardowns`): the
    teardowns worker stops its jobs there and takes its users off the agents' key files.
    How many hosts are left to undo."""
    project = _project_by_name(session, name)
    hosts = record_teardowns(session, project.id, project.name, now)
    session.delete(project)
    return hosts


def _check_change(before: dict[str, str], after: dict[str, str], may_change_admins: bool) -> None:
    refusal = membership_refusal(before, after, caller_may_change_admins=may_change_admins)
    if refusal is not None:
        raise MembershipRefusedError(refusal)


def set_members(
    session: Session,
    project_id: str,
    members: dict[str, str],
    *,
    replace: bool,
    may_change_admins: bool,
) -> wire.Project:
    """Give each `username: role`; with `replace`, remove everyone not listed. Refused
    (`MembershipRefusedError`, nothing written) by `membership_refusal`:
    `may_change_admins` is false for a project manager."""
    users = {name: _user_by_name(session, name) for name in members}
    before = member_roles(session, project_id)
    after = dict(members) if replace else {**before, **members}
    _check_change(before, after, may_change_admins)
    if replace:
        session.execute(delete(Member).where(Member.project_id == project_id))
        session.flush()
    for name, role in members.items():
        existing = session.get(Member, (project_id, users[name].id))
        if existing is None:
            session.add(Member(project_id=project_id, user_id=users[name].id, role=role))
        else:
            existing.role = role
    session.flush()
    return get_project(session, project_id)


def remove_members(
    session: Session, project_id: str, usernames: list[str], *, may_change_admins: bool
) -> wire.Project:
    """Remove the named members, unless `membership_refusal` refuses (see `set_members`)."""
    users = [_user_by_name(session, name) for name in usernames]
    before = member_roles(session, project_id)
    after = {name: role for name, role in before.items() if name not in set(usernames)}
    _check_change(before, after, may_change_admins)
    for user in users:
        session.execute(
            delete(Member).where(Member.project_id == project_id, Member.user_id == user.id)
        )
    session.flush()
    return get_project(session, project_id)


def find_principal(session: Session, token_hash: str) -> Principal | None:
    row = session.execute(
        select(User.id, User.name, User.global_role)
        .join(Token, Token.user_id == User.id)
        .where(Token.token_hash == token_hash)
    ).first()
    return None if row is None else Principal(row[0], row[1], row[2])


def find_membership(session: Session, project_name: str, user_id: str) -> tuple[str, str | None]:
    """(project id or "", the user's role there or None)."""
    project_id = session.scalar(select(Project.id).where(Project.name == project_name))
    if project_id is None:
        return "", None
    role = session.scalar(
        select(Member.role).where(Member.project_id == project_id, Member.user_id == user_id)
    )
    return project_id, role
