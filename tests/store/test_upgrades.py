"""Upgrades: a database of the previous release (schema 0001) full of state reads back after
the upgrade, on SQLite and PostgreSQL; a server never starts against a schema it does not know
or beside a live replica of another version."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, text

from reconciler.adapters.db import Store, create_db_engine, current_revision, head_revision
from reconciler.adapters.db.migrating import upgrade_database
from reconciler.adapters.db.models import Fleet, Instance, Job, Replica, Run
from reconciler.adapters.db.replicas import (
    STALE_AFTER,
    ReplicaStore,
    check_database_for,
    this_server,
)
from reconciler.errors import UsageError
from tests.services.postgres import PostgresServer
from tests.store.deliveries import deliver, delivery

PREVIOUS_RELEASE_HEAD = "0001"


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'old.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


def _fill(store: Store) -> dict[str, str]:
    project = store.get_or_create_project("main")
    now = store.now()
    fleet = store.add(Fleet(project_id=project.id, name="gpus", spec={"type": "fleet"},
                            status="active", created_at=now))  # fmt: skip
    instance = store.add(Instance(fleet_id=fleet.id, project_id=project.id, name="gpus-0",
                                  status="busy", created_at=now, busy_blocks=1))  # fmt: skip
    run = store.add(Run(project_id=project.id, run_name="train", run_type="task",
                        spec={"commands": ["python train.py"]}, spec_hash="h1",
                        status="running", submitted_at=now))  # fmt: skip
    # the jobs row as the previous release wrote it: its columns only (a Core insert)
    job_id = str(uuid.uuid4())
    with store.writing() as session:
        session.execute(
            insert(Job).values(id=job_id, run_id=run.id, status="running",
                               job_spec={"slot": {}}, submitted_at=now,
                               instance_id=instance.id, log_offset=1234,
                               runtime={"started_at": 1.5})
        )  # fmt: skip
    applied = store.create_reconcile(project.id, trigger="webhook", delivery_id="d1")
    store.finish_reconcile(applied.id, status="succeeded", applied_revision="c" * 40,
                           outcome={"actions": [{"ok": True}]})  # fmt: skip
    store.put_secret(project.id, "HF_TOKEN", "ciphertext-bytes")
    store.append_event(project_id=project.id, target_type="run", target_name="train",
                       message="submitted")  # fmt: skip
    deliver(store, "github", "d1")
    return {"project": project.id, "fleet": fleet.id, "instance": instance.id, "run": run.id,
            "job": job_id, "reconcile": applied.id}  # fmt: skip


def test_a_previous_release_database_upgrades_and_reads_back(empty_url: str) -> None:
    engine = create_db_engine(empty_url)
    assert upgrade_database(engine, PREVIOUS_RELEASE_HEAD) == PREVIOUS_RELEASE_HEAD
    ids = _fill(Store(engine))
    assert upgrade_database(engine) == head_revision() != PREVIOUS_RELEASE_HEAD
    store = Store(engine)
    [run] = store.list_runs(ids["project"])
    assert (run.id, run.status, run.spec) == (
        ids["run"],
        "running",
        {"commands": ["python train.py"]},
    )
    [job] = store.list_jobs(run.id)
    assert (job.id, job.instance_id, job.log_offset, job.runtime) == (
        ids["job"], ids["instance"], 1234, {"started_at": 1.5},
    )  # fmt: skip
    fleet, instance = store.get(Fleet, ids["fleet"]), store.get(Instance, ids["instance"])
    assert fleet is not None and fleet.name == "gpus"
    assert instance is not None and instance.busy_blocks == 1
    assert store.last_applied_revision(ids["project"]) == "c" * 40
    [rec] = store.list_reconciles(ids["project"])
    assert rec.outcome == {"actions": [{"ok": True}]}
    assert store.get_secret_ciphertext(ids["project"], "HF_TOKEN") == "ciphertext-bytes"
    assert [e.message for e in store.list_events()] == ["submitted"]
    assert delivery(store, "github", "d1") is not None
    engine.dispose()


def test_a_database_a_newer_dockyard_migrated_is_refused_clearly(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'new.db'}")
    upgrade_database(engine)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(UsageError, match="schema revision 0099, which this Dockyard does not"):
        upgrade_database(engine)
    assert current_revision(engine) == "0099"
    engine.dispose()


def test_a_live_replica_of_another_version_blocks_the_start(empty_url: str) -> None:
    engine = create_db_engine(empty_url)
    upgrade_database(engine)
    store = Store(engine)
    now = store.now()
    me = this_server("host:abc:1")

    def other(version: str, seen: timedelta) -> None:
        store.add(Replica(id=f"old-{version}-{seen.seconds}", version=version, build=me.build,
                          hostname="old-host", pid=42, started_at=now - seen,
                          heartbeat_at=now - seen))  # fmt: skip

    other(me.version, timedelta(seconds=1))  # the same version: a fine replica
    other("0.0.9", timedelta(seconds=STALE_AFTER + 5))  # stopped (or crashed) long enough ago
    check_database_for(empty_url, me)
    ReplicaStore(engine).join(me)
    other("0.0.9", timedelta(seconds=2))
    with pytest.raises(UsageError, match=r"Dockyard 0\.0\.9 .* on old-host, pid 42"):
        check_database_for(empty_url, this_server())
    with pytest.raises(UsageError, match="Stop the other server"):
        ReplicaStore(engine).join(this_server("host:abc:2"))
    ReplicaStore(engine).leave(me)
    assert store.get(Replica, me.id) is None
    engine.dispose()


def test_a_live_replica_of_the_same_version_but_another_build_blocks_the_start(
    empty_url: str,
) -> None:
    engine = create_db_engine(empty_url)
    upgrade_database(engine)
    me = this_server("host:abc:1")
    twin = this_server("host:abc:2", code="f" * 16)  # same version and schema, other code
    assert (twin.version, twin.schema) == (me.version, me.schema) and twin.build != me.build
    ReplicaStore(engine).join(twin)
    with pytest.raises(UsageError, match="the same version and schema, another build of the code"):
        check_database_for(empty_url, me)
    with pytest.raises(UsageError, match=f"code {'f' * 16}"):
        ReplicaStore(engine).join(me)
    ReplicaStore(engine).join(this_server("host:abc:3", code="f" * 16))  # the same build: fine
    engine.dispose()
