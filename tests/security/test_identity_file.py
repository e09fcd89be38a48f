"""A fleet's `identity_file` cannot make the server read an arbitrary file.

The attack of a config-repo writer: an SSH fleet whose `identity_file` is `/etc/shadow`
(or any file the server can read). The real fleets worker and the server's agent deployer
(`controller._AgentSetup`) refuse it before reading it: the fleet fails with a status
message naming the file and the allowed directories, once, with no retry loop
(docs/security.md, "Key files"). A file inside the allowed directories that is no key
fails the same way, instead of a traceback every 15 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.tunnel import TunnelPool
from reconciler.adapters.db.models import Fleet
from reconciler.adapters.db.store import Store
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.controller import _AgentSetup
from reconciler.engine.worker import Lease
from reconciler.engine.workers import WorkerDeps, WorkerTimings, fleets
from reconciler.settings import Settings
from stacks.engines import build_engines
from stacks.local import LocalSettings


class Clock:
    now = 1_800_000_000.0

    def now_ts(self) -> float:
        return self.now


@pytest.fixture
def deps(tmp_path: Path) -> WorkerDeps:
    settings = Settings(data_dir=tmp_path / "data", cli_config=tmp_path / "cli.yml")
    clock = Clock()
    store = Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True, clock=clock)
    pool = TunnelPool()
    setup = _AgentSetup(
        settings.data_dir, tmp_path / "server-key", pool, key_dirs=settings.allowed_key_dirs
    )
    return WorkerDeps(
        store=store,
        clock=clock,
        hint=lambda kind: None,
        agents=AgentDirectory(pool, identity_file=None),
        data_dir=settings.data_dir,
        engines=build_engines(LocalSettings(data_dir=settings.data_dir, user="root"), None),
        timings=WorkerTimings(),
        ssh_deployer=setup.deploy,
    )


def _ssh_fleet(deps: WorkerDeps, identity_file: str) -> str:
    spec = {
        "type": "fleet",
        "name": "gpus",
        "ssh_config": {"user": "root", "identity_file": identity_file, "hosts": ["10.9.9.9"]},
    }
    project = deps.store.get_or_create_project("main")
    resource = deps.store.record_resource(
        "main",
        "fleet",
        "gpus",
        origin="git:gpus.dstack.yml@abc",
        path="gpus.dstack.yml",
        commit="abc",
        spec=spec,
        spec_hash="h",
        status="submitted",
    )
    row = Fleet(
        project_id=project.id,
        name="gpus",
        spec=spec,
        status="submitted",
        created_at=deps.store.now(),
        resource_id=resource.id,
    )
    return str(deps.store.add(row).id)


async def _provision(deps: WorkerDeps, fleet_id: str) -> tuple[Fleet, float | None]:
    ((row_id, token),) = deps.store.leases.claim_due(Fleet, owner="t", limit=1, lease_seconds=30)
    lease = Lease("fleets", row_id, token)
    retry = await fleets.make_process(deps)(lease.row_id, lease.token)
    row = deps.store.get(Fleet, fleet_id)
    assert row is not None
    return row, retry


async def test_identity_file_etc_shadow_fails_the_fleet_with_a_clear_message(
    deps: WorkerDeps,
) -> None:
    fleet, retry = await _provision(deps, _ssh_fleet(deps, "/etc/shadow"))
    assert fleet.status == "failed", (fleet.status, fleet.status_message)
    message = fleet.status_message or ""
    assert "identity_file /etc/shadow is outside the key directories" in message
    assert "--key-dir" in message and str(deps.data_dir) in message
    assert retry is None, "a bad key is not retried every few seconds"


async def test_a_file_in_an_allowed_dir_that_is_no_key_fails_the_fleet(
    deps: WorkerDeps,
) -> None:
    garbage = deps.data_dir / "not-a-key"
    garbage.parent.mkdir(parents=True, exist_ok=True)
    garbage.write_text("hello\n")
    fleet, retry = await _provision(deps, _ssh_fleet(deps, str(garbage)))
    assert fleet.status == "failed", (fleet.status, fleet.status_message)
    assert f"identity_file {garbage} is not a usable private key" in (fleet.status_message or "")
    assert retry is None


async def test_a_symlink_out_of_an_allowed_dir_is_refused(deps: WorkerDeps) -> None:
    link = deps.data_dir / "sneaky-key"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("/etc/shadow")
    fleet, _ = await _provision(deps, _ssh_fleet(deps, str(link)))
    assert fleet.status == "failed"
    assert "outside the key directories" in (fleet.status_message or "")
