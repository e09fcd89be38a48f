"""A failing commit is recorded once, and what a reconcile stores and answers is bounded.

The attack's form: a config repo whose head has thousands of invalid configs, fetched every
few seconds. Before, every timer pass planned the commit again and stored a new reconcile
row with the whole plan (every error) and an event: the database grew by the size of the
plan at every interval, and `reconciles/list` sent every plan back. Here the timer's passes
of the same failing commit count themselves on the row that failed it (one row, one
event), and a plan over `PLAN_BYTES` is stored summarised. A real git repo and a real
store, on SQLite and PostgreSQL; the clock is injected (each pass is five seconds later).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.adapters.db.models import Reconcile
from reconciler.adapters.db.readmodels.project import list_reconciles
from reconciler.core.reconcile_bounds import LIST_BYTES, PLAN_BYTES
from tests.engine.fixtures import Rig, make_rig, task_yaml
from tests.store.conftest import FakeClock

INVALID = "type: task\nname: {name}\ncomands: [x]\n"


@pytest.fixture
def rig(tmp_path: Path, db_url: str) -> Rig:
    rig = make_rig(tmp_path, db_url=db_url)
    rig.store.clock = FakeClock()
    return rig


def _rows(rig: Rig) -> list[Reconcile]:
    project = rig.store.get_or_create_project("main")
    return rig.store.list_reconciles(project.id, limit=1000)


async def _timer_pass(rig: Rig, clock: FakeClock) -> None:
    clock.advance(5.0)
    project = rig.store.get_or_create_project("main")
    rig.store.queue_reconcile(project.id, trigger="timer")
    assert await rig.worker.process_once() == 1


async def test_a_failing_commit_fetched_again_and_again_keeps_one_row(rig: Rig) -> None:
    assert isinstance(rig.store.clock, FakeClock)
    clock = rig.store.clock
    bad = rig.repo.commit(
        {f"jobs/bad{i}.dstack.yml": INVALID.format(name=f"b{i}") for i in range(3)}
    )
    await _timer_pass(rig, clock)
    [first] = _rows(rig)
    assert (first.status, first.attempted_revision) == ("failed", bad)
    assert first.outcome["plan_failed"] == {"base": None, "errors": 3}

    for _ in range(6):
        await _timer_pass(rig, clock)

    [row] = _rows(rig)
    assert row.id == first.id and row.status == "failed"
    assert row.outcome["checked"]["count"] == 7, "each pass is counted on the row"
    assert row.outcome["checked"]["last_at"] == rig.store.now().isoformat()
    assert row.plan == first.plan and row.error == first.error
    events = rig.store.list_events(target_type="reconcile")
    assert len(events) == 1, [e.message for e in events]


async def test_a_new_commit_or_a_requested_pass_is_recorded_again(rig: Rig) -> None:
    assert isinstance(rig.store.clock, FakeClock)
    clock = rig.store.clock
    rig.repo.commit({"a.dstack.yml": INVALID.format(name="aa")})
    await _timer_pass(rig, clock)
    await _timer_pass(rig, clock)
    assert len(_rows(rig)) == 1
    clock.advance(5.0)
    rig.request()  # an explicit request (API, CLI, webhook) always plans and records
    assert await rig.worker.process_once() == 1
    assert [r.trigger for r in _rows(rig)] == ["api", "timer"]
    again = rig.repo.commit({"b.dstack.yml": INVALID.format(name="bb")})
    await _timer_pass(rig, clock)
    assert _rows(rig)[0].attempted_revision == again and len(_rows(rig)) == 3
    good = rig.repo.commit({"a.dstack.yml": task_yaml("aa"), "b.dstack.yml": task_yaml("bb")})
    await _timer_pass(rig, clock)
    await _timer_pass(rig, clock)
    rows = _rows(rig)
    assert [(r.status, r.attempted_revision) for r in rows[:2]] == [
        ("succeeded", good),
        ("succeeded", good),
    ], "only a failed plan is folded"


async def test_a_huge_failing_plan_is_stored_summarised_and_lists_stay_bounded(
    rig: Rig,
) -> None:
    assert isinstance(rig.store.clock, FakeClock)
    clock = rig.store.clock
    many = 2000
    files: dict[str, str | None] = {
        f"jobs/bad{i:04}.dstack.yml": INVALID.format(name=f"b{i}") for i in range(many)
    }
    rig.repo.commit(files)
    await _timer_pass(rig, clock)
    [row] = _rows(rig)
    stored = json.dumps(row.plan)
    assert len(stored.encode()) <= PLAN_BYTES
    assert row.plan["summarised"]["errors"] == many
    assert row.plan["summarised"]["bytes"] > PLAN_BYTES
    assert row.plan["errors"][0]["path"] == "jobs/bad0000.dstack.yml"
    assert len(row.error or "") <= 4000 and "(and 1995 more)" in (row.error or "")
    for i in range(40):  # forty different failing commits: forty rows
        rig.repo.commit({f"jobs/bad{i:04}.dstack.yml": INVALID.format(name=f"c{i}")})
        await _timer_pass(rig, clock)
    project = rig.store.get_or_create_project("main")
    with rig.store.reading() as session:
        answer = list_reconciles(session, project.id, "main", 1000)
    assert len(answer) == 41
    size = len(json.dumps([r.model_dump(mode="json") for r in answer]).encode())
    assert size <= LIST_BYTES + 41 * 4096, size
    assert answer[-1].plan["summarised"]["errors"] == many, "the short form keeps the counts"
