"""`dockyard apply` and the dstack-compatible API refuse a run that breaks the repo policy,
with the rule in the message: a real server built by the composition root with the real
runtime, watching a real git config repo whose `.dockyard.yml` limits runs; the policy is
the one of the project's last applied revision (the startup reconcile applies it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.db import Store
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.pr.gitrepo import make_repo
from tests.web.serving import Running, running_server, wait_until

POLICY = (
    b"prune:\n  allow_empty: true\npolicy:\n  budget:\n    hourly: 5\n  runs:\n    max_gpus: 1\n"
)
RULE = "policy: runs.max_gpus: run big asks 4 GPUs, the policy allows 1"
BIG = {
    "type": "task",
    "name": "big",
    "commands": ["echo hi"],
    "resources": {"gpu": 4},
}


def _real(settings: Settings, store: Store) -> Controller:
    from reconciler.engine.controller import build_controller

    return build_controller(settings, store)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    repo, head = make_repo(tmp_path / "cfg", {".dockyard.yml": POLICY})
    with running_server(tmp_path, _real, repo=str(repo), fetch_interval=3600) as running:
        store = running.server.store

        def applied() -> bool:
            project = store.get_project("main")
            return project is not None and store.last_applied_revision(project.id) == head

        wait_until(applied, timeout=60, what="the startup reconcile to apply the policy")
        yield running


def test_apply_and_the_dstack_api_refuse_a_run_breaking_the_policy(server: Running) -> None:
    text = "type: task\nname: big\ncommands: [echo hi]\nresources:\n  gpu: 4\n"
    spec = {"run_name": "big", "configuration": BIG, "configuration_path": "big.dstack.yml"}
    with server.client(server.admin_token) as http:
        planned = http.post("/api/project/main/runs/get_plan", json={"text": text, "path": "b.yml"})
        refused = [
            http.post("/api/project/main/runs/apply", json={"text": text, "path": "b.yml"}),
            http.post("/api/project/main/runs/get_plan", json={"run_spec": spec}),
            http.post("/api/project/main/runs/apply", json={"plan": {"run_spec": spec}}),
        ]
        listed = http.post("/api/project/main/runs/list", json={}).json()
    # `dockyard apply`'s plan shows it blocked with the rule; applying it is refused
    assert planned.status_code == 200
    assert (planned.json()["action"], planned.json()["violations"]) == ("blocked", [RULE])
    for answer in refused:  # dockyard apply, dstack's get_plan (dstack apply), apply_plan
        assert answer.status_code == 400, answer.text
        assert RULE in answer.text
    assert all(r.get("run_name") != "big" for r in listed)
