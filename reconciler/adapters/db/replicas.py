"""Which Dockyard servers use this database: their version, schema and last heartbeat.

A server checks, before it migrates anything (`refuse_other_versions`), that no live replica
(a heartbeat in the last `STALE_AFTER` seconds) runs another version or schema head: a newer
server never upgrades the schema under an older one still taking work, and an older one
never starts against a schema it does not know. Once started it registers (`join`), beats
every `HEARTBEAT_EVERY` seconds and leaves on a clean stop. Called by `reconciler.app` (the
check) and `reconciler.engine.replicas` (join, beat, leave); see docs/operations.md.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Engine, delete, inspect, select, update

from reconciler.adapters.db.connecting import create_db_engine
from reconciler.adapters.db.migrating import head_revision
from reconciler.adapters.db.models import Replica
from reconciler.adapters.db.sessions import StoreBase
from reconciler.errors import UsageError

HEARTBEAT_EVERY = 10.0
STALE_AFTER = 30.0


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    """This server: its lease identity, the Dockyard version and the schema head it ships."""

    id: str
    version: str
    schema: str

    @property
    def build(self) -> str:
        return f"schema {self.schema}"

    def differs(self, other: Replica) -> bool:
        return (other.version, other.build) != (self.version, self.build)


def describe(replica: Replica, age: float) -> str:
    return (
        f"Dockyard {replica.version} ({replica.build}) on {replica.hostname}, pid {replica.pid}, "
        f"last seen {age:.0f}s ago"
    )


class ReplicaStore(StoreBase):
    """See the module docstring."""

    def others_of_another_version(self, me: ReplicaIdentity) -> list[str]:
        """Live replicas (not `me`) whose version or schema differs, described."""
        now = self.now()
        fresh = now - timedelta(seconds=STALE_AFTER)
        query = select(Replica).where(Replica.heartbeat_at >= fresh, Replica.id != me.id)
        with self.reading() as session:
            rows = list(session.scalars(query))
        return [
            describe(row, (now - row.heartbeat_at).total_seconds())
            for row in rows
            if me.differs(row)
        ]

    def join(self, me: ReplicaIdentity) -> None:
        """Register this server, or refuse when a live replica of another version is there."""
        others = self.others_of_another_version(me)
        if others:
            raise UsageError(_refusal(me, others))
        now = self.now()
        with self.writing() as session:
            session.execute(delete(Replica).where(Replica.id == me.id))
            session.add(
                Replica(
                    id=me.id,
                    version=me.version,
                    build=me.build,
                    hostname=socket.gethostname(),
                    pid=os.getpid(),
                    started_at=now,
                    heartbeat_at=now,
                )
            )

    def beat(self, me: ReplicaIdentity) -> bool:
        """Stamp this server's heartbeat; False when its row is gone (then join again)."""
        with self.writing() as session:
            result = session.execute(
                update(Replica).where(Replica.id == me.id).values(heartbeat_at=self.now())
            )
        return bool(getattr(result, "rowcount", 0))

    def leave(self, me: ReplicaIdentity) -> None:
        with self.writing() as session:
            session.execute(delete(Replica).where(Replica.id == me.id))


def dockyard_version() -> str:
    """The installed Dockyard's version (`0.0.0` when not installed as a package)."""
    try:
        return importlib.metadata.version("dockyard")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def this_server(identity: str = "") -> ReplicaIdentity:
    """This process as a replica: its lease identity, version and the schema head it ships."""
    return ReplicaIdentity(identity, dockyard_version(), head_revision())


def check_database_for(db_url: str, me: ReplicaIdentity) -> None:
    """`refuse_other_versions` on a short-lived engine (the server's start, before it migrates)."""
    engine = create_db_engine(db_url)
    try:
        refuse_other_versions(engine, me)
    finally:
        engine.dispose()


def refuse_other_versions(engine: Engine, me: ReplicaIdentity) -> None:
    """Before migrating: raise `UsageError` if a live replica of another version uses the
    database (a database without the `replicas` table has none that could say so)."""
    if "replicas" not in inspect(engine).get_table_names():
        return
    others = ReplicaStore(engine).others_of_another_version(me)
    if others:
        raise UsageError(_refusal(me, others))


def _refusal(me: ReplicaIdentity, others: list[str]) -> str:
    return (
        f"another Dockyard server of a different version uses this database: "
        f"{'; '.join(others)}. This is Dockyard {me.version} ({me.build}). Stop the other "
        f"server(s) first (a stopped server's entry expires {STALE_AFTER:.0f}s after its "
        "last heartbeat), then start this one: see docs/operations.md, Upgrades"
    )
