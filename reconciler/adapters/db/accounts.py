"""The `Store` methods for projects, users, API tokens, members and secrets.

A token is shown once (`create_token` returns it) and stored only as its sha256 digest;
`resolve_token` maps a presented token back to its user. Secrets arrive and leave as
ciphertext: the server encrypts them with `secrets_crypto.SecretsCipher`.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import delete, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Fleet, Member, Project, Secret, Token, User
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.memberships import MembershipRefusedError, membership_refusal
from reconciler.domain.principals import FleetKeyHolders
from reconciler.errors import UsageError

GLOBAL_ROLES = frozenset({"admin", "user"})
PROJECT_ROLES = frozenset({"admin", "manager", "user"})


def hash_token(token: str) -> str:
    """The sha256 hex digest under which a token is stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A new random API token (shown once; only its `hash_token` is stored). Never one that
    starts with `-`: a command line (`dstack project add --token T`) would read it as a flag."""
    token = secrets.token_urlsafe(32)
    while token.startswith("-"):
        token = secrets.token_urlsafe(32)
    return token


class AccountsStore(StoreBase):
    # -- projects ---------------------------------------------------------------------------

    def get_project(self, name: str) -> Project | None:
        with self.reading() as session:
            return session.scalars(select(Project).where(Project.name == name)).one_or_none()

    def get_or_create_project(self, name: str) -> Project:
        """The project called `name`, created if missing (safe under concurrent callers)."""
        existing = self.get_project(name)
        if existing is not None:
            return existing
        try:
            return self.add(Project(name=name, created_at=self.now()))
        except IntegrityError:  # created by someone else in between
            found = self.get_project(name)
            if found is None:
                raise
            return found

    def list_projects(self) -> list[Project]:
        with self.reading() as session:
            return list(session.scalars(select(Project).order_by(Project.name)))

    # -- users and tokens -------------------------------------------------------------------

    def create_user(self, name: str, *, global_role: str = "user") -> User:
        if global_role not in GLOBAL_ROLES:
            raise UsageError(f"unknown global role {global_role!r}: use admin or user")
        try:
            return self.add(User(name=name, global_role=global_role, created_at=self.now()))
        except IntegrityError:
            raise UsageError(f"user {name!r} already exists") from None

    def get_user(self, name: str) -> User | None:
        with self.reading() as session:
            return session.scalars(select(User).where(User.name == name)).one_or_none()

    def list_users(self) -> list[User]:
        with self.reading() as session:
            return list(session.scalars(select(User).order_by(User.name)))

    def create_token(self, user_id: str) -> str:
        """A new API token for the user; only its hash is stored, so return it now or never."""
        token = new_token()
        self.add(Token(user_id=user_id, token_hash=hash_token(token), created_at=self.now()))
        return token

    def resolve_token(self, token: str) -> User | None:
        """The user a presented token belongs to (stamping `last_used_at`), or None."""
        with self.writing() as session:
            found = session.execute(
                select(Token, User)
                .join(User, User.id == Token.user_id)
                .where(Token.token_hash == hash_token(token))
            ).one_or_none()
            if found is None:
                return None
            found[0].last_used_at = self.now()
            return found[1]

    def revoke_tokens(self, user_id: str) -> int:
        """Delete every token of the user; returns how many."""
        with self.writing() as session:
            result = session.execute(delete(Token).where(Token.user_id == user_id))
        return int(getattr(result, "rowcount", 0))

    # -- members ----------------------------------------------------------------------------

    def set_member(self, project_id: str, user_id: str, role: str) -> None:
        """Make the user a member of the project with `role` (replacing a previous role).
        Every writer of memberships keeps dstack's rule (`membership_refusal`): refused
        (`MembershipRefusedError`, nothing written) when no admin would be left."""
        if role not in PROJECT_ROLES:
            raise UsageError(f"unknown project role {role!r}: use admin, manager or user")
        with self.writing() as session:
            before = member_roles(session, project_id)
            name = session.get(User, user_id)
            after = {**before, (name.name if name else user_id): role}
            _refuse_unless_allowed(before, after)
            member = session.get(Member, (project_id, user_id))
            if member is None:
                session.add(Member(project_id=project_id, user_id=user_id, role=role))
            else:
                member.role = role

    def get_member_role(self, project_id: str, user_id: str) -> str | None:
        with self.reading() as session:
            member = session.get(Member, (project_id, user_id))
            return None if member is None else member.role

    def list_members(self, project_id: str) -> list[tuple[User, str]]:
        """(user, role) of every member of the project, by user name."""
        with self.reading() as session:
            rows = session.execute(
                select(User, Member.role)
                .join(Member, Member.user_id == User.id)
                .where(Member.project_id == project_id)
                .order_by(User.name)
            )
            return [(user, role) for user, role in rows]

    def fleet_key_holders(self, fleet_id: str) -> FleetKeyHolders | None:
        """The project of fleet `fleet_id` and the users who may reach its jobs: the
        project's members and the global admins (None: no such fleet)."""
        with self.reading() as session:
            found = session.execute(
                select(Project.id, Project.name)
                .join(Fleet, Fleet.project_id == Project.id)
                .where(Fleet.id == fleet_id)
            ).one_or_none()
            if found is None:
                return None
            members = select(Member.user_id).where(Member.project_id == found[0])
            users = session.scalars(
                select(User.id)
                .where(or_(User.id.in_(members), User.global_role == "admin"))
                .order_by(User.id)
            )
            return FleetKeyHolders(str(found[1]), tuple(users))

    def remove_member(self, project_id: str, user_id: str) -> bool:
        """Remove the user from the project; refused like `set_member` when it would
        leave the project without an admin."""
        with self.writing() as session:
            user = session.get(User, user_id)
            before = member_roles(session, project_id)
            after = {k: v for k, v in before.items() if k != (user.name if user else user_id)}
            _refuse_unless_allowed(before, after)
            result = session.execute(
                delete(Member).where(Member.project_id == project_id, Member.user_id == user_id)
            )
        return bool(getattr(result, "rowcount", 0))

    # -- secrets (ciphertext only) ----------------------------------------------------------

    def put_secret(self, project_id: str, name: str, ciphertext: str) -> None:
        """Create or replace the secret `name` of the project."""
        now = self.now()
        with self.writing() as session:
            secret = session.scalars(
                select(Secret).where(Secret.project_id == project_id, Secret.name == name)
            ).one_or_none()
            if secret is None:
                session.add(
                    Secret(
                        project_id=project_id,
                        name=name,
                        ciphertext=ciphertext,
                        created_at=now,
                        updated_at=now,
                    )
                )
            else:
                secret.ciphertext = ciphertext
                secret.updated_at = now

    def get_secret_ciphertext(self, project_id: str, name: str) -> str | None:
        with self.reading() as session:
            return session.scalars(
                select(Secret.ciphertext).where(
                    Secret.project_id == project_id, Secret.name == name
                )
            ).one_or_none()

    def list_secret_names(self, project_id: str) -> list[str]:
        with self.reading() as session:
            return list(
                session.scalars(
                    select(Secret.name).where(Secret.project_id == project_id).order_by(Secret.name)
                )
            )

    def delete_secret(self, project_id: str, name: str) -> bool:
        with self.writing() as session:
            result = session.execute(
                delete(Secret).where(Secret.project_id == project_id, Secret.name == name)
            )
        return bool(getattr(result, "rowcount", 0))


def member_roles(session: Session, project_id: str) -> dict[str, str]:
    """`username: role` of the project's members now (the store's writes and the API's)."""
    rows = session.execute(
        select(User.name, Member.role)
        .join(Member, Member.user_id == User.id)
        .where(Member.project_id == project_id)
    )
    return {str(name): str(role) for name, role in rows}


def _refuse_unless_allowed(before: dict[str, str], after: dict[str, str]) -> None:
    refusal = membership_refusal(before, after, caller_may_change_admins=True)
    if refusal is not None:
        raise MembershipRefusedError(refusal)
