"""Preview runs in the store and the engine's deploy/teardown/sweep, on SQLite and
PostgreSQL (no agent: the workers' part is in tests/pr/test_preview_runs.py)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Fleet, Maintenance, Run
from reconciler.adapters.db.previewruns import PreviewRunsStore
from reconciler.core.policy import PolicyRules
from reconciler.domain.previewruns import PreviewState, PullRef
from reconciler.engine.previewruns import TASK, PreviewRuns
from reconciler.errors import ConflictError
from reconciler.pr.reviewing import load_files
from schemas import parse_config
from tests.store.conftest import FakeClock
from tests.store.members import member_role, set_member

PULL = PullRef("github", "acme/cfg", 7)
SERVICE = b"type: service\nname: web\nport: 8000\ncommands: [serve]\n"
CLOUD = b"type: fleet\nname: cloud\nbackends: [aws]\nnodes: 1\n"
GPU = b"type: service\nname: chat\nport: 8000\ncommands: [serve]\nfleets: [cloud]\nresources:\n  gpu: A100\n"  # noqa: E501


def _rules(**previews: Any) -> PolicyRules:
    return PolicyRules.model_validate({"previews": previews})


def _deploy(
    runs: PreviewRuns, files: dict[str, bytes], rules: PolicyRules, pull: PullRef = PULL
) -> Any:
    desired = load_files(files, commit="c" * 40, parse=parse_config).desired
    return runs.deploy(
        pull,
        project="main",
        head="c" * 40,
        desired=desired,
        rules=rules,
        requested_by="maintainer",
        trigger="label",
        fork=True,
    )


def _runs(store: Store) -> PreviewRuns:
    return PreviewRuns(store, capacity_wait=0.0)


def test_deploy_makes_the_project_with_the_members_and_teardown_removes_it(
    store: Store, clock: FakeClock
) -> None:
    main = store.get_or_create_project("main")
    member = store.create_user("reviewer")
    set_member(store, main.id, "reviewer", "manager")
    runs = _runs(store)
    preview = _deploy(runs, {"web.dstack.yml": SERVICE}, _rules(ttl="30m"))
    assert preview.state is PreviewState.ACTIVE and preview.preview_project == "main-pr-7"
    assert preview.deployed_at == store.now()
    assert (preview.expires_at - preview.deployed_at).total_seconds() == 1800
    project = store.get_project("main-pr-7")
    assert project is not None
    assert member_role(store, "main-pr-7", member.id) == "user"
    live = {(r.kind.value, r.name): r.origin for r in store.load_observed("main-pr-7").resources}
    assert set(live) == {("fleet", "local"), ("service", "web")}
    assert live[("service", "web")] == "git:web.dstack.yml@" + "c" * 40  # `apply` cannot touch it
    again = _deploy(runs, {"web.dstack.yml": SERVICE}, _rules())  # same head: nothing new
    assert again.state is PreviewState.ACTIVE
    assert len([r for r in store.load_observed("main-pr-7").resources if r.name == "web"]) == 1

    torn = runs.teardown(PULL, "the pull request was closed")
    assert torn is not None and torn.state is PreviewState.STOPPING
    run_rows = [r for r in _all(store, Run) if r.project_id == project.id]
    assert {r.status for r in run_rows} == {"terminating"}
    # the workers finish: the run ends, the fleet is terminated
    for row in run_rows:
        store.update(Run, row.id, status="terminated")
    for fleet in [f for f in _all(store, Fleet) if f.project_id == project.id]:
        store.update(Fleet, fleet.id, status="terminated")
    swept = runs.sweep_once()
    assert swept is not None and [p.state for p in swept] == [PreviewState.CLOSED]
    assert store.get_project("main-pr-7") is None
    assert store.get_project("main") is not None


def _all(store: Store, model: Any) -> list[Any]:
    from sqlalchemy import select

    with store.reading() as session:
        return list(session.scalars(select(model)))


def test_a_preview_over_the_budget_is_refused_with_the_rule(store: Store) -> None:
    store.get_or_create_project("main")
    runs = _runs(store)
    files = {"cloud.dstack.yml": CLOUD, "chat.dstack.yml": GPU}
    preview = _deploy(runs, files, _rules(fleets=["cloud"], budget={"hourly": 1}))
    assert preview.state is PreviewState.REFUSED
    assert preview.reason.startswith(
        "policy: previews.budget.hourly: this preview brings the previews of project main to $"
    )
    assert "over their $1.00/h budget (runs: chat " in preview.reason
    assert store.get_project("main-pr-7") is None

    # within the budget it deploys, and counts against the next PR's preview
    rules = _rules(fleets=["cloud"], budget={"hourly": 30})
    first = _deploy(runs, files, rules)
    assert first.state is PreviewState.ACTIVE and first.hourly > 1
    previews = PreviewRunsStore(store.engine)
    assert previews.previews_hourly("main", excluding=PullRef("github", "acme/cfg", 8)) == (
        pytest.approx(first.hourly)
    )
    second = _deploy(runs, files, _rules(fleets=["cloud"], budget={"hourly": first.hourly * 1.5}),
                     PullRef("github", "acme/cfg", 8))  # fmt: skip
    assert second.state is PreviewState.REFUSED


def test_a_project_of_that_name_that_no_preview_owns_is_refused(store: Store) -> None:
    store.get_or_create_project("main")
    store.get_or_create_project("main-pr-7")
    preview = _deploy(_runs(store), {"web.dstack.yml": SERVICE}, _rules())
    assert preview.state is PreviewState.REFUSED
    assert "project main-pr-7 exists and is not a preview" in preview.reason
    with pytest.raises(ConflictError):
        PreviewRunsStore(store.engine).open_preview_project(preview)


def test_the_ttl_ends_a_preview_and_the_sweep_takes_only_its_own_row(
    store: Store, clock: FakeClock
) -> None:
    store.get_or_create_project("main")
    runs = _runs(store)
    _deploy(runs, {"web.dstack.yml": SERVICE}, _rules(ttl="1h"))
    PreviewRunsStore(store.engine).ensure_maintenance("retention")
    swept = runs.sweep_once()
    assert swept is not None and [p.state for p in swept] == [PreviewState.ACTIVE]
    clock.advance(3600)
    swept = runs.sweep_once()
    assert swept is not None and [p.state for p in swept] == [PreviewState.STOPPING]
    stored = PreviewRunsStore(store.engine).get_preview(PULL)
    assert stored is not None and stored.reason == "its TTL (1h) ended"
    retention = store.get(Maintenance, "retention")
    assert retention is not None and retention.last_processed_at is None  # never claimed
    assert store.get(Maintenance, TASK) is not None
