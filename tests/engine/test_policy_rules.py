"""The repo policy's run limits through the real plan function, reconcile and apply: a
commit breaking a limit applies nothing of the violating run and everything else; the PR
comment lists the violation first and `dockyard/plan` fails; `dockyard apply` (and the
dstack API, which goes through the same unmanaged apply) refuses with the rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.db.models import Reconcile
from reconciler.adapters.db.store import Store
from reconciler.core.loading import load_desired, parse_document
from reconciler.core.policy import RepoPolicy, parse_policy
from reconciler.core.rendering_markdown import render_markdown
from reconciler.domain.observed import ObservedState
from reconciler.engine import unmanaged
from reconciler.engine.planning import plan_offline
from reconciler.errors import UsageError
from reconciler.pr.commenting import plan_status
from reconciler.pr.reviewing import PlanReport
from schemas import parse_config
from tests.engine.fixtures import Rig, make_rig, task_yaml

POLICY = "policy:\n  runs:\n    max_gpus: 1\n    privileged: false\n"
BIG = task_yaml("big").replace("resources:\n", "resources:\n  gpu: 4\n")


@pytest.fixture
def rig(tmp_path: Path, db_url: str) -> Rig:
    return make_rig(tmp_path, db_url=db_url)


async def _reconcile(rig: Rig) -> Reconcile:
    reconcile_id = rig.request()
    assert await rig.worker.process_once() == 1
    row = rig.store.get_reconcile(reconcile_id)
    assert row is not None
    return row


async def test_a_run_breaking_a_limit_is_blocked_and_the_rest_applied(rig: Rig) -> None:
    rig.repo.commit(
        {".dockyard.yml": POLICY, "big.dstack.yml": BIG, "small.dstack.yml": task_yaml("small")}
    )

    row = await _reconcile(rig)

    assert row.status == "succeeded"
    actions = {a["name"]: a for a in row.plan["actions"]}
    assert actions["big"]["action"] == "blocked"
    assert actions["big"]["violations"] == [
        "policy: runs.max_gpus: run big asks 4 GPUs, the policy allows 1"
    ]
    assert actions["small"]["action"] == "create"
    project = rig.store.get_or_create_project("main")
    assert [r.run_name for r in rig.store.list_runs(project.id)] == ["small"]
    assert row.outcome["summary"].startswith("applied ")
    assert "blocked 1" in row.outcome["summary"]


def test_the_pr_comment_lists_violations_first_and_the_status_fails(tmp_path: Path) -> None:
    policy = parse_policy(POLICY)
    assert isinstance(policy, RepoPolicy)
    documents = [
        parse_document(text.encode(), path, parse_config)
        for path, text in (("big.dstack.yml", BIG), ("small.dstack.yml", task_yaml("small")))
    ]
    desired = load_desired(documents, commit="c" * 40, policy=policy, parse=parse_config)
    plan = plan_offline(desired, policy, ObservedState("main", ()), base=None)
    markdown = render_markdown(plan)
    first = markdown.split("\n\n")[1]
    assert first.startswith("**⛔ Policy: 1 run(s) break the repo policy")
    assert "runs.max_gpus: run big asks 4 GPUs" in markdown.split("<details>")[0]
    status = plan_status(PlanReport(plan=plan))
    assert status.state.value == "failure"
    assert status.description.startswith("1 run(s) break the repo policy")


def test_apply_refuses_a_run_breaking_a_limit_with_the_rule(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True)
    policy = parse_policy(POLICY)
    assert isinstance(policy, RepoPolicy)
    limits = policy.policy.runs
    with pytest.raises(
        UsageError, match=r"runs.max_gpus: run big asks 4 GPUs, the policy allows 1"
    ):
        unmanaged.apply_one(
            store, "main", text=BIG, path="big.dstack.yml", user="alice", force=False, limits=limits
        )
    plan, _ = unmanaged.apply_one(
        store,
        "main",
        text=task_yaml("small"),
        path="small.dstack.yml",
        user="alice",
        force=False,
        limits=limits,
    )
    assert plan["action"] == "create"
