"""Projects, users, API tokens, project members and encrypted secrets.

Tokens are stored only as their sha256 hex digest; secrets only as ciphertext (the server
encrypts with `secrets_crypto`). Used by the `Store` (accounts part) and the web layer's auth.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, UTCDateTime, id_column


class Project(Base, kw_only=True):
    __tablename__ = "projects"

    id: Mapped[str] = id_column()
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class User(Base, kw_only=True):
    __tablename__ = "users"

    id: Mapped[str] = id_column()
    name: Mapped[str] = mapped_column(String(100), unique=True)
    global_role: Mapped[str] = mapped_column(String(16))  # admin | user
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Token(Base, kw_only=True):
    __tablename__ = "tokens"

    id: Mapped[str] = id_column()
    user_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class Member(Base, kw_only=True):
    __tablename__ = "members"

    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(16))  # admin | manager | user


class Secret(Base, kw_only=True):
    __tablename__ = "secrets"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE")
    )
    name: Mapped[str] = mapped_column(String(200))
    ciphertext: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
