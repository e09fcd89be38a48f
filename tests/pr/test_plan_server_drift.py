"""A fleet deleted by hand, seen by a PR plan on the server (`dockyard plan --server`, the
`POST …/plan/files` route the PR webhook's function serves): the fleet Git still declares
is its own drift action ("was deleted outside Dockyard … will restore"), listed under the
comment's drift section apart from the commit's own changes.

A real git checkout, a real server on loopback and its store (SQLite).
"""

from __future__ import annotations

import json
from pathlib import Path

from reconciler.core.planning import plan
from reconciler.core.policy import RepoPolicy
from reconciler.core.rendering_json import to_json_dict
from reconciler.domain.observed import ObservedState
from reconciler.pr.reviewing import load_files
from schemas import parse_config
from tests.pr.gitrepo import commit_files, make_repo
from tests.pr.test_comment_cli import run_in_process
from tests.web.fakes import FakeController
from tests.web.serving import running_server

FILES = {
    "fleets/here.dstack.yml": b"type: fleet\nname: here\nnodes: 1\n",
    "fleets/spare.dstack.yml": b"type: fleet\nname: spare\nnodes: 1\n",
}
BASE = "b" * 40


def test_a_fleet_deleted_by_hand_is_drift_in_the_server_plan(tmp_path: Path) -> None:
    with running_server(tmp_path, lambda settings, store: FakeController(store)) as running:
        store = running.server.store
        base = load_files(FILES, commit=BASE, parse=parse_config)
        applied = plan(base.desired, ObservedState("main"), RepoPolicy())
        project_id = store.get_or_create_project("main").id
        row = store.create_reconcile(project_id, trigger="api", attempted_revision=BASE)
        store.set_reconcile_stage(row.id, "apply", plan=to_json_dict(applied))
        assert store.apply_plan_batch(row.id, applied.actions, applying_stages={"apply"})
        store.finish_reconcile(row.id, status="succeeded", applied_revision=BASE)
        assert store.mark_resource_deleted("main", "fleet", "here")  # deleted by hand

        repo, _ = make_repo(tmp_path / "configs", FILES)
        new = {"fleets/new.dstack.yml": b"type: fleet\nname: new\nnodes: 1\n"}
        commit_files(repo, {**FILES, **new}, "a new fleet")
        command = ["dockyard", "plan", "--repo", str(repo), "--ref", "HEAD", "--server"]
        command += [running.url, "--data-dir", str(tmp_path / "cli"), "--token"]
        command += [running.admin_token]
        data = json.loads(run_in_process([*command, "--format", "json"], {}).stdout)
        actions = {a["name"]: a for a in data["actions"]}
        assert (actions["here"]["action"], actions["here"].get("drift")) == ("create", True)
        assert actions["here"]["reason"].startswith(
            "drift: fleet `here` was deleted outside Dockyard (last applied from "
            "fleets/here.dstack.yml@bbbbbbbbbbbb)"
        )
        assert (actions["new"]["action"], actions["new"].get("drift")) == ("create", None)
        assert actions["spare"]["action"] == "noop"

        markdown = run_in_process([*command, "--format", "markdown"], {}).stdout
        own, drift = markdown.split("#### Drift: changed outside Git, not by this PR")
        assert "<code>new</code>" in own and "<code>here</code>" not in own
        assert "<code>here</code>" in drift and "was deleted outside Dockyard" in drift
