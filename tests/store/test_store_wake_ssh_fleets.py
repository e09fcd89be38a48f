"""`wake_ssh_fleets` on SQLite and PostgreSQL: after a membership change, only the active
fleets with a live SSH host become due now (their hosts' agent key files are written at
their next pass); other fleets keep their due time."""

from __future__ import annotations

from datetime import timedelta

from reconciler.adapters.db.models import Fleet, Instance
from reconciler.adapters.db.readmodels.capacity import wake_ssh_fleets
from reconciler.adapters.db.readmodels.database import Database
from reconciler.adapters.db.store import Store


def _fleet(store: Store, name: str, backend: str, *, status: str = "active", **kw: object) -> str:
    project = store.get_or_create_project("main")
    later = store.now() + timedelta(hours=1)
    fleet = store.add(
        Fleet(project_id=project.id, name=name, spec={}, status=status,
              created_at=store.now(), due_at=later, deleted=bool(kw.get("deleted")))
    )  # fmt: skip
    store.add(
        Instance(fleet_id=fleet.id, project_id=project.id, name=f"{name}-0",
                 status=str(kw.get("instance_status", "idle")), created_at=store.now(),
                 backend=backend)
    )  # fmt: skip
    return fleet.id


def _due(store: Store, fleet_id: str) -> object:
    row = store.get(Fleet, fleet_id)
    assert row is not None
    return row.due_at


def test_only_active_fleets_with_a_live_ssh_host_are_made_due(store: Store) -> None:
    ssh = _fleet(store, "ssh", "ssh")
    busy = _fleet(store, "ssh-busy", "ssh", instance_status="busy")
    local = _fleet(store, "local", "local")
    gone_host = _fleet(store, "ssh-gone", "ssh", instance_status="terminated")
    deleted = _fleet(store, "ssh-deleted", "ssh", deleted=True)
    leaving = _fleet(store, "ssh-leaving", "ssh", status="terminating")
    assert Database(store.engine).write_now(wake_ssh_fleets) == 2
    assert _due(store, ssh) is None and _due(store, busy) is None
    for other in (local, gone_host, deleted, leaving):
        assert _due(store, other) is not None, other
    assert Database(store.engine).write_now(wake_ssh_fleets) == 2  # idempotent
