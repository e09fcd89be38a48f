"""`dockyard server` refuses to start beside a live server of another version, with a clear
message and before it touches the schema."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from reconciler.adapters.db import Store, create_db_engine, current_revision, head_revision
from reconciler.adapters.db.migrating import upgrade_database
from reconciler.adapters.db.models import Replica
from reconciler.adapters.db.replicas import this_server
from reconciler.engine.replicas import ReplicaHeartbeat

BEATING = timedelta(minutes=10)
"""A heartbeat stamped ahead: the entry stays live however slowly the server starts."""
OLDER = "0007"  # a schema revision below head, with the replicas table of today


def test_server_start_is_refused_while_an_older_version_beats(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    store = Store.from_url(f"sqlite:///{data_dir / 'dockyard.db'}", migrate=True)
    now = store.now()
    store.add(Replica(id="old:1", version="0.0.9", build="schema 0001", hostname="old-host",
                      pid=7, started_at=now, heartbeat_at=now + BEATING))  # fmt: skip
    env = {**os.environ, "DOCKYARD_CONFIG": str(tmp_path / "cli.yml"), "COLUMNS": "400"}
    dockyard = Path(sys.executable).parent / "dockyard"
    result = subprocess.run(
        [str(dockyard), "server", "--data-dir", str(data_dir), "--port", "0"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert "another Dockyard server of a different version" in output
    assert "Dockyard 0.0.9 (schema 0001) on old-host, pid 7" in output
    assert "Traceback" not in output
    assert current_revision(store.engine) == head_revision()
    store.close()


def test_server_start_is_refused_beside_the_same_version_of_another_build(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    store = Store.from_url(f"sqlite:///{data_dir / 'dockyard.db'}", migrate=True)
    now = store.now()
    other = this_server(code="0123456789abcdef")  # a checkout that moved, no version bump
    assert other.code != this_server().code
    store.add(Replica(id="other:1", version=other.version, build=other.build,
                      hostname="twin-host", pid=8, started_at=now,
                      heartbeat_at=now + BEATING))  # fmt: skip
    env = {**os.environ, "DOCKYARD_CONFIG": str(tmp_path / "cli.yml"), "COLUMNS": "400"}
    dockyard = Path(sys.executable).parent / "dockyard"
    result = subprocess.run(
        [str(dockyard), "server", "--data-dir", str(data_dir), "--port", "0"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert "code 0123456789abcdef) on twin-host, pid 8" in output
    assert "the same version and schema, another build of the code" in output
    assert f"This is Dockyard {other.version} (schema {other.schema}, code " in output
    assert "Traceback" not in output
    store.close()


def test_a_refused_start_leaves_an_older_schema_unmigrated(tmp_path: Path) -> None:
    """docs/operations.md: a server refuses to start "before it migrates anything"."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    engine = create_db_engine(f"sqlite:///{data_dir / 'dockyard.db'}")
    upgrade_database(engine, OLDER)  # a database the new version would migrate
    assert head_revision() != OLDER
    store = Store(engine)
    now = store.now()
    store.add(Replica(id="old:1", version="0.0.9", build="schema 0007", hostname="old-host",
                      pid=7, started_at=now, heartbeat_at=now + BEATING))  # fmt: skip
    env = {**os.environ, "DOCKYARD_CONFIG": str(tmp_path / "cli.yml"), "COLUMNS": "400"}
    dockyard = Path(sys.executable).parent / "dockyard"
    result = subprocess.run(
        [str(dockyard), "server", "--data-dir", str(data_dir), "--port", "0"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and "another Dockyard server of a different version" in output
    assert current_revision(engine) == OLDER  # nothing was migrated
    store.close()


async def test_a_started_server_beats_and_leaves_on_stop(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'd.db'}", migrate=True)
    heartbeat = ReplicaHeartbeat(store, this_server("host:abc:9"), every=0.01)
    await heartbeat.start()
    first = store.get(Replica, "host:abc:9")
    assert first is not None and first.version == this_server().version

    def beaten() -> bool:
        row = store.get(Replica, "host:abc:9")
        return row is not None and row.heartbeat_at > first.heartbeat_at

    deadline = time.monotonic() + 30
    while not beaten():
        assert time.monotonic() < deadline, "no heartbeat"
        await asyncio.sleep(0.02)
    await heartbeat.stop()
    assert store.get(Replica, "host:abc:9") is None
    store.close()
