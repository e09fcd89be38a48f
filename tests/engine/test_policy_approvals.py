"""Approved policy exceptions in the real reconcile (SQLite and PostgreSQL, real git repos):
an approval is keyed by the approved head's git tree, so the merge of that content applies
the violating run, and any other content (or an approver the deployed policy does not name,
even one the merged commit itself adds) keeps it blocked."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.db.models import Reconcile
from reconciler.core.loading import load_desired, parse_document
from reconciler.core.policy import RepoPolicy, parse_policy
from reconciler.core.rendering_json import to_json_dict
from reconciler.core.rendering_markdown import render_markdown
from reconciler.domain.approvals import Approval
from reconciler.domain.observed import ObservedState
from reconciler.engine.planning import plan_offline
from reconciler.pr.commenting import plan_status
from reconciler.pr.document import read_report
from reconciler.pr.reviewing import PlanReport
from schemas import parse_config
from tests.engine.fixtures import Rig, make_rig, task_yaml

POLICY = "policy:\n  approvers: [alice]\n  runs:\n    max_gpus: 1\n"
BASE = POLICY + "prune:\n  allow_empty: true\n"  # the deployed branch: a policy, no configs yet
BIG = task_yaml("big").replace("resources:\n", "resources:\n  gpu: 4\n")
VIOLATION = "policy: runs.max_gpus: run big asks 4 GPUs, the policy allows 1"


@pytest.fixture
def rig(tmp_path: Path, db_url: str) -> Rig:
    return make_rig(tmp_path, db_url=db_url)


async def _reconcile(rig: Rig) -> Reconcile:
    reconcile_id = rig.request()
    assert await rig.worker.process_once() == 1
    row = rig.store.get_reconcile(reconcile_id)
    assert row is not None
    return row


def _pull_request(rig: Rig, files: dict[str, str | None]) -> str:
    """Commit `files` on branch `pr` off main; the head's tree (what an approval names)."""
    rig.repo.git("checkout", "-q", "-b", "pr")
    head = rig.repo.commit(files, "pr")
    rig.repo.git("checkout", "-q", "main")
    return rig.repo.git("rev-parse", f"{head}^{{tree}}")


def _approve(rig: Rig, tree: str, approver: str = "alice") -> None:
    approval = Approval(
        "main", tree, "f" * 40, approver, "github", "acme/gpus", 3, 99, (VIOLATION,)
    )
    assert rig.store.record_approval(approval)


def _runs(rig: Rig) -> list[str]:
    project = rig.store.get_or_create_project("main")
    return sorted(r.run_name for r in rig.store.list_runs(project.id))


async def test_the_merge_of_approved_content_applies_the_violating_run(rig: Rig) -> None:
    rig.repo.commit({".dockyard.yml": BASE}, "base")
    assert (await _reconcile(rig)).status == "succeeded"  # the deployed policy names alice
    tree = _pull_request(rig, {"big.dstack.yml": BIG, "small.dstack.yml": task_yaml("small")})
    _approve(rig, tree)
    rig.repo.git("merge", "-q", "--no-ff", "-m", "merge pr", "pr")
    assert rig.repo.git("rev-parse", "HEAD^{tree}") == tree

    row = await _reconcile(rig)

    assert row.status == "succeeded"
    big = next(a for a in row.plan["actions"] if a["name"] == "big")
    assert (big["action"], big["violations"], big["approved_by"]) == (
        "create",
        [VIOLATION],
        ["alice"],
    )
    assert _runs(rig) == ["big", "small"]
    assert row.outcome["summary"].endswith("blocked 0")


async def test_other_content_than_the_approved_keeps_the_run_blocked(rig: Rig) -> None:
    rig.repo.commit({".dockyard.yml": POLICY}, "base")
    tree = _pull_request(rig, {"big.dstack.yml": BIG})
    _approve(rig, tree)
    rig.repo.commit({"small.dstack.yml": task_yaml("small")}, "main moved on")
    rig.repo.git("merge", "-q", "--no-ff", "-m", "merge pr", "pr")
    assert rig.repo.git("rev-parse", "HEAD^{tree}") != tree

    row = await _reconcile(rig)

    big = next(a for a in row.plan["actions"] if a["name"] == "big")
    assert big["action"] == "blocked" and "approved_by" not in big
    assert _runs(rig) == ["small"]


async def test_a_merge_naming_its_own_approver_does_not_count(rig: Rig) -> None:
    """mallory's PR adds mallory to `policy.approvers` beside the violating run and mallory
    approves its tree: the approvers are the deployed branch's, so the merge stays blocked."""
    rig.repo.commit({".dockyard.yml": BASE}, "base")
    assert (await _reconcile(rig)).status == "succeeded"
    own = BASE.replace("[alice]", "[alice, mallory]")
    tree = _pull_request(rig, {".dockyard.yml": own, "big.dstack.yml": BIG})
    _approve(rig, tree, approver="mallory")
    rig.repo.git("merge", "-q", "--ff-only", "pr")
    assert rig.repo.git("rev-parse", "HEAD^{tree}") == tree

    row = await _reconcile(rig)

    big = next(a for a in row.plan["actions"] if a["name"] == "big")
    assert big["action"] == "blocked" and "approved_by" not in big
    assert _runs(rig) == []


async def test_an_approval_by_someone_the_policy_does_not_name_does_not_count(rig: Rig) -> None:
    rig.repo.commit({".dockyard.yml": POLICY, "big.dstack.yml": BIG})
    _approve(rig, rig.repo.git("rev-parse", "HEAD^{tree}"), approver="mallory")

    row = await _reconcile(rig)

    big = next(a for a in row.plan["actions"] if a["name"] == "big")
    assert big["action"] == "blocked"
    assert _runs(rig) == []


def test_the_comment_says_who_approved_which_violations_and_the_status_passes() -> None:
    policy = parse_policy(POLICY)
    assert isinstance(policy, RepoPolicy)
    documents = [parse_document(BIG.encode(), "big.dstack.yml", parse_config)]
    desired = load_desired(documents, commit="c" * 40, policy=policy, parse=parse_config)
    empty = ObservedState("main", ())
    blocked = plan_offline(desired, policy, empty, base=None)
    approved = plan_offline(desired, policy, empty, base=None, approved_by=("alice",))

    assert plan_status(PlanReport(plan=blocked)).state.value == "failure"
    status = plan_status(PlanReport(plan=approved))
    assert status.state.value == "success"
    assert status.description.startswith("policy exception approved by alice; 2 to create")
    markdown = render_markdown(approved)
    assert "⛔" not in markdown
    head = markdown.split("<details>")[0]
    assert "**✅ Policy exception approved by @alice for this content" in head
    assert f"- task `big`: {VIOLATION}" in head
    again = next(a for a in read_report(to_json_dict(approved)).plan.actions if a.name == "big")
    assert (again.approved_by, again.violations) == (("alice",), (VIOLATION,))
