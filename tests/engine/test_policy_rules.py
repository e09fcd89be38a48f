"""The repo policy's run limits through the real plan function, reconcile and apply: a
commit breaking a limit applies nothing of the violating run and everything else; the PR
comment lists the violation first and `dockyard/plan` fails; `dockyard apply` (and the
dstack API, which goes through the same unmanaged apply) refuses with the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.db.models import Reconcile
from reconciler.adapters.db.store import Store
from reconciler.core.loading import load_desired, parse_document
from reconciler.core.policy import RepoPolicy, parse_policy
from reconciler.core.rendering_markdown import render_markdown
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import ObservedResource, ObservedState
from reconciler.engine import unmanaged
from reconciler.engine.planning import plan_offline
from reconciler.errors import UsageError
from reconciler.pr.commenting import comment_body, cost_line, plan_status
from reconciler.pr.reviewing import PlanReport, priced
from schemas import parse_config
from stacks.catalog import load_catalog, parse_catalog
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
    rules = policy.policy
    with pytest.raises(
        UsageError, match=r"runs.max_gpus: run big asks 4 GPUs, the policy allows 1"
    ):
        unmanaged.apply_one(
            store, "main", text=BIG, path="big.dstack.yml", user="alice", force=False, rules=rules
        )
    plan, _ = unmanaged.apply_one(
        store,
        "main",
        text=task_yaml("small"),
        path="small.dstack.yml",
        user="alice",
        force=False,
        rules=rules,
    )
    assert plan["action"] == "create"


CLOUD = "type: fleet\nname: cloud\nbackends: [aws]\nnodes: 0..2\n"
PRICED = "policy:\n  budget:\n    hourly: 20\n  runs:\n    max_price: 15\n"


def _gpu_task(name: str, gpu: str) -> str:
    return task_yaml(name).replace("resources:\n", f"fleets: [cloud]\nresources:\n  gpu: {gpu}\n")


def _plan(files: dict[str, str], policy_text: str, observed: ObservedState) -> list[Any]:
    policy = parse_policy(policy_text)
    assert isinstance(policy, RepoPolicy)
    documents = [parse_document(text.encode(), path, parse_config) for path, text in files.items()]
    desired = load_desired(documents, commit="c" * 40, policy=policy, parse=parse_config)
    return list(plan_offline(desired, policy, observed, base=None).actions)


def test_max_price_and_the_budget_are_judged_at_the_best_offer() -> None:
    files = {
        "cloud.dstack.yml": CLOUD,
        "big.dstack.yml": _gpu_task("big", "H100:8"),
        "small.dstack.yml": _gpu_task("small", "T4:1"),
    }
    actions = {a.name: a for a in _plan(files, PRICED, ObservedState("main", ()))}
    big = actions["big"]
    assert big.action.value == "blocked"
    assert big.violations[0].startswith("policy: runs.max_price: run big costs $")
    assert "the policy allows $15.00/h" in big.violations[0]
    assert big.violations[1].startswith("policy: budget.hourly: this brings project main to $")
    assert "over its $20.00/h budget (run big adds $" in big.violations[1]
    assert actions["small"].action.value == "blocked"  # it adds cost too, and the total is over
    assert [v.split(":")[1] for v in actions["small"].violations] == [" budget.hourly"]


def test_within_the_budget_nothing_is_blocked_and_local_runs_cost_nothing() -> None:
    on_here = _gpu_task("big", "H100:8").replace("fleets: [cloud]", "fleets: [here]")
    files = {
        "cloud.dstack.yml": CLOUD,
        "here.dstack.yml": "type: fleet\nname: here\nnodes: 1\n",
        "small.dstack.yml": _gpu_task("small", "T4:1"),
        "big.dstack.yml": on_here,
    }
    actions = {a.name: a for a in _plan(files, PRICED, ObservedState("main", ()))}
    assert actions["small"].action.value == "create" and not actions["small"].violations
    assert actions["big"].action.value == "create"  # on a local fleet: $0/h


def test_the_budget_counts_what_runs_now_cli_runs_included() -> None:
    def observed(name: str, text: str, kind: Kind, origin: str) -> ObservedResource:
        model = parse_config(text, f"{name}.dstack.yml")
        return ObservedResource(
            kind, name, "main", origin, model.normalized(), model.spec_hash(), "running"
        )

    now = ObservedState(
        "main",
        (
            observed("cloud", CLOUD, Kind.FLEET, "git:cloud.dstack.yml@" + "a" * 40),
            observed("adhoc", _gpu_task("adhoc", "H100:8"), Kind.TASK, "cli:alice"),
        ),
    )
    files = {"cloud.dstack.yml": CLOUD, "small.dstack.yml": _gpu_task("small", "T4:1")}
    actions = {a.name: a for a in _plan(files, PRICED, now)}
    assert actions["small"].action.value == "blocked"
    assert "budget.hourly: this brings project main to $" in actions["small"].violations[0]


# -- the catalog is a dependency: loaded once by its holder, passed to every plan ----------

DEAR = (
    "backend,region,zones,instance_type,gpu_vendor,gpu_name,gpu_count,gpu_memory_gib,cpus,"
    "memory_gib,price_on_demand,price_spot\n"
    "aws,us-east-1,us-east-1a,g4dn.xlarge,nvidia,T4,1,16,4,16,30.0,29.0\n"
)


def test_plans_price_runs_with_the_catalog_passed_in() -> None:
    policy = parse_policy(PRICED)
    assert isinstance(policy, RepoPolicy)
    files = {"cloud.dstack.yml": CLOUD, "small.dstack.yml": _gpu_task("small", "T4:1")}
    documents = [parse_document(text.encode(), path, parse_config) for path, text in files.items()]
    desired = load_desired(documents, commit="c" * 40, policy=policy, parse=parse_config)
    empty = ObservedState("main", ())

    bundled = plan_offline(desired, policy, empty, base=None, catalog=load_catalog())
    dear = plan_offline(desired, policy, empty, base=None, catalog=parse_catalog(DEAR))

    assert not {a.name: a for a in bundled.actions}["small"].violations
    small = {a.name: a for a in dear.actions}["small"]
    assert small.violations[0].startswith("policy: runs.max_price: run small costs $30.00/h")


async def test_the_reconcile_prices_with_the_catalog_its_reconciler_holds(rig: Rig) -> None:
    assert rig.reconciler.catalog == load_catalog()  # loaded once, when it was built
    rig.reconciler.catalog = parse_catalog(DEAR)
    rig.repo.commit(
        {
            ".dockyard.yml": PRICED,
            "cloud.dstack.yml": CLOUD,
            "small.dstack.yml": _gpu_task("small", "T4:1"),
        }
    )

    row = await _reconcile(rig)

    small = next(a for a in row.plan["actions"] if a["name"] == "small")
    assert small["violations"][0].startswith("policy: runs.max_price: run small costs $30.00/h")


def test_apply_prices_with_the_catalog_passed_in(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True)
    policy = parse_policy(PRICED)
    assert isinstance(policy, RepoPolicy)
    cloud = parse_config(CLOUD, "cloud.dstack.yml")
    store.record_resource(
        "main", "fleet", "cloud", origin="git:cloud.dstack.yml@" + "a" * 40,
        path="cloud.dstack.yml", commit="a" * 40, spec=cloud.normalized(),
        spec_hash=cloud.spec_hash(), status="running",
    )  # fmt: skip
    text = _gpu_task("small", "T4:1")
    action = unmanaged.plan_one(
        store, "main", text=text, path="s.yml", user="a", rules=policy.policy,
        catalog=parse_catalog(DEAR),
    )  # fmt: skip
    assert action.action.value == "blocked"
    assert action.reason.startswith("policy: runs.max_price: run small costs $30.00/h")
    cheap = unmanaged.plan_one(
        store, "main", text=text, path="s.yml", user="a", rules=policy.policy
    )
    assert cheap.action.value == "create"


def test_a_run_with_no_price_counts_zero_and_says_so() -> None:
    odd = _gpu_task("odd", "MI999:1")  # no catalog offer has this GPU
    running_odd = ObservedResource(
        Kind.TASK, "adhoc", "main", "cli:alice",
        parse_config(_gpu_task("adhoc", "MI999:2"), "a.yml").normalized(), "h", "running",
    )  # fmt: skip
    cloud = parse_config(CLOUD, "cloud.dstack.yml")
    fleet = ObservedResource(
        Kind.FLEET, "cloud", "main", "git:cloud.dstack.yml@" + "a" * 40,
        cloud.normalized(), cloud.spec_hash(), "active",
    )  # fmt: skip
    now = ObservedState("main", (fleet, running_odd))
    files = {
        "cloud.dstack.yml": CLOUD,
        "big.dstack.yml": _gpu_task("big", "H100:8"),
        "odd.dstack.yml": odd,
    }
    policy = parse_policy(PRICED)
    assert isinstance(policy, RepoPolicy)
    documents = [parse_document(text.encode(), path, parse_config) for path, text in files.items()]
    desired = load_desired(documents, commit="c" * 40, policy=policy, parse=parse_config)
    plan = plan_offline(desired, policy, now, base=None, catalog=load_catalog())
    actions = {a.name: a for a in plan.actions}

    budget = next(v for v in actions["big"].violations if "budget.hourly" in v)
    assert budget.endswith("; counted $0 (no price): run odd (planned), run adhoc (running))")
    assert not actions["odd"].violations  # $0 adds nothing, breaks no price rule
    report = priced(plan, desired, now, load_catalog())
    line = cost_line(report)
    assert line is not None and line.endswith("(1 run(s) match no offer: counted $0/h)")
    markdown = comment_body(report, limit=65_536)
    assert "💲 no offer matches this run's resources on its fleets: counted $0/h" in markdown
