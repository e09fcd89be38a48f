"""The `Store` methods for projects, users, the holders of a fleet's keys and secrets.

Tokens and memberships are written and read by the API's units
(`reconciler.adapters.db.readmodels.accounts`: `issue_token`, `find_principal`,
`set_members`, `remove_members`), with `hash_token` and `member_roles` from here. A token is
shown once and stored only as its sha256 digest. Secrets arrive and leave as ciphertext:
the server encrypts them with `secrets_crypto.SecretsCipher`.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import delete, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Fleet, Member, Project, Secret, User
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.principals import FleetKeyHolders
from reconciler.errors import UsageError

GLOBAL_ROLES = frozenset({"admin", "user"})


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

    # -- users ------------------------------------------------------------------------------

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

    # -- who may reach a fleet's jobs -------------------------------------------------------

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
