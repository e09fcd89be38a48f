"""A fleet that cannot deploy does not hold the reconcile's apply stage.

One commit: an SSH fleet whose only host is a closed port of 127.0.0.1 (its agent can
never be deployed: the fleets worker records the failure and retries), the local fleet,
and a task. The reconcile applies everything and ends without waiting for the SSH fleet
(before, it waited for capacity in flight — up to two minutes — before submitting any
run); the task runs to done on the local fleet while the SSH fleet keeps retrying.

The whole runtime (`build_controller`, every worker) on a git repo, the real local agent.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from reconciler.adapters.db.models import Fleet
from tests.engine.fixtures import LiveLoop, task_yaml

pytestmark = pytest.mark.timeout(180)

LOCAL_FLEET = "type: fleet\nname: local\nnodes: 1\n"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fleet(loop: LiveLoop, name: str) -> Fleet | None:
    return next((f for f in loop.store.list_fleets(loop.project_id) if f.name == name), None)


async def test_a_task_runs_while_an_undeployable_ssh_fleet_retries(tmp_path: Path) -> None:
    ssh_fleet = (
        "type: fleet\nname: lab\nssh_config:\n  user: root\n"
        f"  hosts:\n    - hostname: 127.0.0.1\n      port: {_closed_port()}\n"
    )
    async with LiveLoop(tmp_path) as loop:
        commit = loop.repo.commit(
            {
                "fleets/lab.dstack.yml": ssh_fleet,
                "fleets/local.dstack.yml": LOCAL_FLEET,
                "tasks/hello.dstack.yml": task_yaml("hello", "echo hello-beside-a-stuck-fleet"),
            }
        )
        # the reconcile's own wait for capacity is 120 s: ending well before shows it
        # did not wait for the SSH fleet
        row = await loop.reconcile(within=60)
        assert (row.status, row.error, row.applied_revision) == ("succeeded", None, commit)
        assert {r.run_name for r in loop.runs()} == {"hello"}, "the run was submitted"

        await loop.until(lambda: [r.status for r in loop.runs("hello")] == ["done"], within=90)
        assert "hello-beside-a-stuck-fleet" in loop.logs(loop.runs("hello")[0])
        lab = _fleet(loop, "lab")
        assert lab is not None and lab.status == "submitted", "still retrying, not given up"
        assert lab.status_message, "the failed deploy is recorded on the fleet"
