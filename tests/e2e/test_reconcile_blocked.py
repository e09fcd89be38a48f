"""Blocked means blocked, nothing more: on a server without the Pulumi CLI, one commit with
a cloud fleet, a cloud volume and a local task plans the cloud resources `blocked` (with
the reason and the fix) and everything else still reconciles: the local task runs to done.

The whole runtime (`build_controller`, every worker) on a git repo, the real local agent.
The server has a Pulumi passphrase (so the Pulumi engine is built) but no `pulumi` on its
PATH, exactly as a user without the CLI has it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from reconciler.adapters.db.records import reconcile_record
from reconciler.web.pages import render_page
from stacks.protocol import PULUMI_NOT_FOUND
from tests.engine.fixtures import LiveLoop, task_yaml

CLOUD_FLEET = "type: fleet\nname: cloud\nbackends: [aws]\nnodes: 1\nresources:\n  gpu: A10G\n"
CLOUD_VOLUME = "type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 100GB\n"
LOCAL_FLEET = "type: fleet\nname: local\nnodes: 1\n"


def hide_pulumi(monkeypatch: pytest.MonkeyPatch) -> None:
    """PATH without any directory that holds a `pulumi` executable."""
    kept = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and shutil.which("pulumi", path=d) is None
    ]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    assert shutil.which("pulumi") is None


async def test_cloud_resources_are_blocked_and_the_local_task_runs_to_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_pulumi(monkeypatch)
    async with LiveLoop(tmp_path, pulumi_passphrase="e2e-passphrase") as loop:
        commit = loop.repo.commit(
            {
                "fleets/cloud.dstack.yml": CLOUD_FLEET,
                "volumes/data.dstack.yml": CLOUD_VOLUME,
                "fleets/local.dstack.yml": LOCAL_FLEET,
                "tasks/hello.dstack.yml": task_yaml("hello", "echo hello-from-local"),
            }
        )
        row = await loop.reconcile()

        assert (row.status, row.error, row.applied_revision) == ("succeeded", None, commit)
        actions = {a["name"]: a for a in row.plan["actions"]}
        for name in ("cloud", "data"):
            assert actions[name]["action"] == "blocked"
            assert actions[name]["reason"] == f"blocked: {PULUMI_NOT_FOUND}"  # reason and fix
        assert actions["hello"]["action"] == "create"
        assert actions["local"]["action"] == "create"
        assert actions["local"]["preview"]["error"] is None  # the local engine previewed it
        summary = row.outcome["summary"]
        assert summary.startswith("applied 2, blocked 2: ")
        assert f"main/fleet/cloud: blocked: {PULUMI_NOT_FOUND}" in summary
        assert {line.split(":")[0] for line in row.outcome["blocked"]} == {
            "main/fleet/cloud",
            "main/volume/data",
        }
        page = render_page(reconcile_record(row, "main"))
        assert "applied 2, blocked 2" in page and 'class="status blocked"' in page

        await loop.until(lambda: [r.status for r in loop.runs("hello")] == ["done"], within=120)
        assert "hello-from-local" in loop.logs(loop.runs("hello")[0])

        again = await loop.reconcile()  # still blocked, nothing else to do
        assert again.status == "succeeded"
        assert again.outcome["summary"].startswith("applied 0, blocked 2: ")
        assert len(loop.runs("hello")) == 1
