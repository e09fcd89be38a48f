"""The teardowns worker against a host that does not answer, on a real SQLite store.

A deleted project's host whose sshd is gone (a closed port of 127.0.0.1): the row stays,
saying why, and is tried again later; once a day has passed since the project was deleted
the worker gives up and drops it. The clock is the store's, so nothing waits.
"""

from __future__ import annotations

import socket
from pathlib import Path

from agent.tunnel import TunnelPool
from reconciler.adapters.db.models import Fleet, HostTeardown, Instance, Job, Run
from reconciler.adapters.db.readmodels.accounts import delete_project
from reconciler.adapters.db.readmodels.database import Database
from reconciler.adapters.db.store import Store
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.worker import RELEASED
from reconciler.engine.workers import WorkerDeps, teardowns


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def now_ts(self) -> float:
        return self.now


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_host_is_tried_again_then_given_up(tmp_path: Path) -> None:
    clock = Clock()
    store = Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True, clock=clock)
    pool = TunnelPool()
    deps = WorkerDeps(
        store=store,
        clock=clock,
        hint=lambda kind: None,
        agents=AgentDirectory(pool, identity_file=None),
        data_dir=tmp_path / "data",
    )
    project = store.get_or_create_project("gone")
    fleet = store.add(
        Fleet(project_id=project.id, name="ssh", spec={}, status="active", created_at=store.now())
    )
    instance = store.add(
        Instance(fleet_id=fleet.id, project_id=project.id, name="ssh-0", status="busy",
                 created_at=store.now(), hostname="127.0.0.1", ssh_port=_closed_port(),
                 ssh_user="root", agent_port=10998, backend="ssh")
    )  # fmt: skip
    run = store.add(
        Run(project_id=project.id, run_name="r", run_type="task", spec={}, spec_hash="h",
            status="running", submitted_at=store.now())
    )  # fmt: skip
    store.add(
        Job(run_id=run.id, status="running", job_spec={}, submitted_at=store.now(),
            instance_id=instance.id)
    )  # fmt: skip
    Database(store.engine).write_now(delete_project, "gone", store.now())
    process = teardowns.make_process(deps)
    try:
        ((row_id, token),) = store.leases.claim_due(
            HostTeardown, owner="t", limit=1, lease_seconds=60
        )
        assert await process(row_id, token) == RELEASED
        (held,) = store.list_teardowns()
        assert "not undone yet" in held.status_message and "deleted project gone" in (
            held.status_message
        )
        assert store.leases.claim_due(HostTeardown, owner="t", limit=1, lease_seconds=60) == []
        clock.now += teardowns.GIVE_UP_SECONDS + 1
        ((row_id, token),) = store.leases.claim_due(
            HostTeardown, owner="t", limit=1, lease_seconds=60
        )
        assert await process(row_id, token) == RELEASED
        assert store.list_teardowns() == []
    finally:
        await pool.close()
        store.close()
