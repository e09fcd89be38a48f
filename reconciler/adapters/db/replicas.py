"""Which Dockyard servers use this database: their version, schema and last heartbeat.

A server checks, before it migrates anything (`refuse_other_versions`), that no live replica
(a heartbeat in the last `STALE_AFTER` seconds) runs another version, schema head or build of
the code (`server_build`: the agent's build, as SSH hosts' agents are compared by, and every
`.py` of the server's packages): a newer server never upgrades the schema under an older one
still taking work, an older one never starts against a schema it does not know, and a
checkout that moved without a version bump never runs beside the code it replaces. Once
started it registers (`join`), beats every `HEARTBEAT_EVERY` seconds and leaves on a clean
stop. Called by `reconciler.app` (the check) and `reconciler.engine.replicas` (join, beat,
leave); see docs/operations.md.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine, delete, inspect, select, update

from agent.protocol import agent_build
from reconciler.adapters.db.connecting import create_db_engine
from reconciler.adapters.db.migrating import head_revision
from reconciler.adapters.db.models import Replica
from reconciler.adapters.db.sessions import StoreBase
from reconciler.errors import UsageError

HEARTBEAT_EVERY = 10.0
STALE_AFTER = 30.0


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    """This server: its lease identity, the Dockyard version, the schema head it ships and
    the build of its code (`server_build`)."""

    id: str
    version: str
    schema: str
    code: str = ""

    @property
    def build(self) -> str:
        return f"schema {self.schema}, code {self.code}" if self.code else f"schema {self.schema}"

    def differs(self, other: Replica) -> bool:
        return (other.version, other.build) != (self.version, self.build)


def describe(replica: Replica, age: float, me: ReplicaIdentity) -> str:
    same = replica.version == me.version and replica.build.split(",")[0] == f"schema {me.schema}"
    why = " (the same version and schema, another build of the code)" if same else ""
    return (
        f"Dockyard {replica.version} ({replica.build}) on {replica.hostname}, pid {replica.pid}, "
        f"last seen {age:.0f}s ago{why}"
    )


class ReplicaStore(StoreBase):
    """See the module docstring."""

    def others_of_another_version(self, me: ReplicaIdentity) -> list[str]:
        """Live replicas (not `me`) whose version, schema or code build differs, described."""
        now = self.now()
        fresh = now - timedelta(seconds=STALE_AFTER)
        query = select(Replica).where(Replica.heartbeat_at >= fresh, Replica.id != me.id)
        with self.reading() as session:
            rows = list(session.scalars(query))
        return [
            describe(row, (now - row.heartbeat_at).total_seconds(), me)
            for row in rows
            if me.differs(row)
        ]

    def join(self, me: ReplicaIdentity) -> None:
        """Register this server, or refuse when a live replica of another version or build is
        there."""
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


SERVER_PACKAGES = ("reconciler", "schemas", "stacks")


@functools.cache  # the code this process loaded: files edited after its start do not count
def server_build() -> str:
    """A fingerprint of the code this server runs: the agent's build (`agent_build`, what the
    server compares agents by) and every `.py` of the server's packages, hashed as
    `agent_build` hashes the agent's."""
    digest = hashlib.sha256(agent_build().encode() + b"\0")
    for package in SERVER_PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            root = Path(location)
            for path in sorted(root.rglob("*.py")):
                name = f"{package}/{path.relative_to(root)}"
                digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def this_server(identity: str = "", code: str | None = None) -> ReplicaIdentity:
    """This process as a replica: its lease identity, version, the schema head it ships and
    its code's build (`server_build()` unless `code` is given)."""
    build = server_build() if code is None else code
    return ReplicaIdentity(identity, dockyard_version(), head_revision(), build)


def check_database_for(db_url: str, me: ReplicaIdentity) -> None:
    """`refuse_other_versions` on a short-lived engine (the server's start, before it migrates)."""
    engine = create_db_engine(db_url)
    try:
        refuse_other_versions(engine, me)
    finally:
        engine.dispose()


def refuse_other_versions(engine: Engine, me: ReplicaIdentity) -> None:
    """Before migrating: raise `UsageError` if a live replica of another version or build uses
    the database (a database without the `replicas` table has none that could say so)."""
    if "replicas" not in inspect(engine).get_table_names():
        return
    others = ReplicaStore(engine).others_of_another_version(me)
    if others:
        raise UsageError(_refusal(me, others))


def _refusal(me: ReplicaIdentity, others: list[str]) -> str:
    return (
        f"another Dockyard server of a different version or build uses this database: "
        f"{'; '.join(others)}. This is Dockyard {me.version} ({me.build}). Stop the other "
        f"server(s) first (a stopped server's entry expires {STALE_AFTER:.0f}s after its "
        "last heartbeat), then start this one: see docs/operations.md, Upgrades"
    )
