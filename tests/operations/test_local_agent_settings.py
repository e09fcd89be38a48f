"""The local fleet's agent is set up by the server's settings: its free-disk threshold, work
root and isolation are `dockyard server` flags and `DOCKYARD_LOCAL_*` variables, they reach
the agent the server starts (one started with other values is replaced), and the agent's
previous log is kept, rotated (bounded in count and size), not truncated at its start.

The agent is the real one, started through `build_controller`'s `AgentSetup` with its data
dir on a real 64 MiB tmpfs (tests/operations/tmpfs.py): under the agent's own 1 GiB default
it refuses every job there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.client import AgentClient
from agent.local import LOG_KEEP, local_paths, rotate_log, stop_local_agent
from agent.tunnel import SSHTarget
from reconciler.adapters.db.store import Store
from reconciler.cli.main import build_app
from reconciler.engine.controller import build_controller
from reconciler.errors import UsageError
from reconciler.settings import LOCAL_AGENT_FIELDS, Settings
from tests.operations.tmpfs import tmpfs

pytestmark = pytest.mark.timeout(180)


def test_the_local_agents_settings_are_server_flags_and_variables() -> None:
    result = CliRunner().invoke(build_app(), ["server", "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    for name in LOCAL_AGENT_FIELDS:
        assert f"--{name.replace('_', '-')}" in result.output
        assert f"DOCKYARD_{name.upper()}" in result.output
    assert "wait (1GiB)" in result.output
    settings = Settings.from_env(
        {"DOCKYARD_LOCAL_MIN_FREE_DISK": "16MiB", "DOCKYARD_LOCAL_WORK_ROOT": "/srv/jobs"},
        local_job_isolation="process",
    )
    assert settings.local_min_free_disk == 16 * 2**20
    assert settings.local_work_root == "/srv/jobs"
    assert settings.local_job_isolation == "process"
    assert Settings.from_env({}, local_min_free_disk="0").local_min_free_disk == 0
    for bad in ("jobs", "/", "/srv/../etc"):
        with pytest.raises(UsageError, match="local_work_root"):
            Settings.from_env({}, local_work_root=bad)
    with pytest.raises(UsageError, match="local_min_free_disk"):
        Settings.from_env({"DOCKYARD_LOCAL_MIN_FREE_DISK": "a lot"})


async def _disk_problem(settings: Settings, store: Store) -> str:
    """Start (or reuse) the local agent as the server does, and ask it about its disk."""
    controller = build_controller(settings, store)
    setup = controller.setup
    assert setup is not None
    try:
        local = await setup.local()
        target = SSHTarget(
            local.hostname,
            local.ssh_port,
            user=local.ssh_user,
            identity_file=str(setup.key),
            known_hosts=str(local_paths(settings.data_dir).known_hosts),
        )
        async with AgentClient.over_tunnel(setup.pool, target, local.agent_port) as client:
            return (await client.healthcheck()).disk_problem
    finally:
        await setup.pool.close()


async def test_the_free_disk_threshold_reaches_the_local_agent_and_its_log_is_kept(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "small", 64) as mount:
        data_dir = mount / "data"
        store = Store.from_url(f"sqlite:///{tmp_path / 'dockyard.db'}", migrate=True)
        environ = {"DOCKYARD_LOCAL_JOB_USER": "self", "DOCKYARD_DATA_DIR": str(data_dir)}
        low = Settings.from_env(environ | {"DOCKYARD_LOCAL_MIN_FREE_DISK": "8MiB"})
        log = local_paths(data_dir).log
        try:
            assert await _disk_problem(low, store) == ""  # 64 MiB free is plenty at 8 MiB
            with log.open("ab") as handle:  # the agent's last words, as a crash leaves them
                handle.write(b"the first agent's last line\n")
            first = log.read_bytes()
            default = Settings.from_env(environ)  # the agent's own 1 GiB: replaced, refuses
            assert "disk almost full" in await _disk_problem(default, store)
            assert log.with_name("agent.log.1").read_bytes() == first  # kept, not truncated
            assert b"the first agent's last line" not in log.read_bytes()
        finally:
            stop_local_agent(data_dir)
            store.close()


def test_rotation_keeps_a_bounded_number_of_bounded_logs(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    for n in range(LOG_KEEP + 2):
        log.write_bytes(f"agent {n}\n".encode() + b"x" * 100)
        rotate_log(log, keep_bytes=64)
        assert not log.exists()  # the next agent writes a fresh one
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == [f"agent.log.{n}" for n in range(1, LOG_KEEP + 1)]
    assert all(os.path.getsize(tmp_path / name) == 64 for name in kept)  # the tail of each
    assert (tmp_path / "agent.log.1").read_bytes().endswith(b"x" * 64)
    log.write_bytes(b"")
    rotate_log(log)  # an empty log (an agent that said nothing) does not push out the others
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.log", *kept]
