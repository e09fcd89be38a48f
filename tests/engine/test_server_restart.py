"""A restarted server looks at its hosts at once: the instances worker's pass of every
active host is due when the controller starts (`EngineController.start`), so the agent's
job events are followed again (their first page wakes every job there) and running jobs'
logs flow within a second, not at the host's next interval (up to 7 s; an hour here).

The whole runtime (`build_controller`) with the real local agent, stopped gracefully and
built again on the same store and data dir, as a server restart does; the store's wake of
every active row on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.adapters.db.models import Fleet, Instance, Job
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.controller import build_controller
from reconciler.engine.worker import Lease
from tests.engine.fixtures import LiveLoop, task_yaml

pytestmark = pytest.mark.timeout(240)
TICKS = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.1; done"


def _offset(loop: LiveLoop) -> int:
    return sum(j.log_offset for r in loop.runs("tick") for j in loop.store.list_jobs(r.id))


async def test_after_a_graceful_restart_running_jobs_progress_at_once(tmp_path: Path) -> None:
    async with LiveLoop(tmp_path) as loop:
        loop.repo.commit({"tick.dstack.yml": task_yaml("tick", TICKS)})
        assert (await loop.reconcile()).status == "succeeded"
        await loop.until(lambda: _offset(loop) > 0, within=90)
        await loop.controller.stop()  # graceful: the job keeps running on its host
        later = loop.store.now() + timedelta(hours=1)
        with loop.store.reading() as session:
            instances = [i.id for i in session.query(Instance).all()]
            jobs = [j.id for j in session.query(Job).all()]
        for instance_id in instances:  # the host's next pass in its interval (an hour here)
            loop.store.update(Instance, instance_id, due_at=later)
        for job_id in jobs:  # a followed running job sleeps until its events wake it
            loop.store.update(Job, job_id, due_at=later)
        before = _offset(loop)

        loop.controller = build_controller(loop.settings, loop.store)  # the new process
        loop.controller.runtime.projects.clear()  # no startup reconcile: not what wakes it
        await loop.controller.start()
        await loop.until(lambda: _offset(loop) > before, within=60)


async def test_wake_all_makes_every_active_row_due_now(db_url: str) -> None:
    store = Store.from_url(db_url, migrate=True)
    try:
        project = store.get_or_create_project("main")
        later = store.now() + timedelta(hours=1)
        fleet = store.add(
            Fleet(project_id=project.id, name="f", spec={}, status="active",
                  created_at=store.now())
        )  # fmt: skip
        rows = {
            status: store.add(
                Instance(
                    fleet_id=fleet.id,
                    project_id=project.id,
                    name=f"f-{status}",
                    status=status,
                    created_at=store.now(),
                    due_at=later,
                )
            ).id
            for status in ("idle", "busy", "terminated")
        }
        woken = await StoreLeasing(store.leases, make_lease=Lease).wake_all("instances")
        assert woken == 2
        due = {s: store.get(Instance, i).due_at for s, i in rows.items()}  # type: ignore[union-attr]
        assert due["idle"] is None and due["busy"] is None
        assert due["terminated"] is not None  # a row no worker takes stays as it was
    finally:
        store.close()
