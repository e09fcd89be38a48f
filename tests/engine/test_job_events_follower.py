"""The server's job event follower: an agent's "job started" is recorded `running` in the
store at once (`Store.record_agent_running`), and every job the page names is woken.

The agent's long-poll is played by a scripted client (its pages as the real agent serves
them: tests/agent/test_job_events.py); the store is real (SQLite).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent.client import AgentClient
from agent.jobevents import JobEvent, JobEventKind, JobEventsPage
from reconciler.adapters.db.models import Fleet, Instance, Job, Run
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.jobevents import JobEventFollower
from reconciler.engine.worker import Lease
from reconciler.ports import WorkKind


class ScriptedAgent:
    """The long-poll answers of one agent: its pages in order, then nothing new."""

    name = "scripted"

    def __init__(self, pages: list[JobEventsPage]) -> None:
        self._pages = pages

    async def job_events(self, since: int, epoch: str, *, wait: float) -> JobEventsPage:
        if self._pages:
            return self._pages.pop(0)
        await asyncio.sleep(3600)  # held, as the agent holds a reader with no news
        raise AssertionError("unreachable")


async def _until(condition: Any, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_a_started_job_is_recorded_running_and_woken(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'dockyard.db'}", migrate=True)
    project = store.get_or_create_project("main")
    later = store.now() + timedelta(hours=1)
    fleet = store.add(
        Fleet(project_id=project.id, name="f", spec={}, status="active", created_at=store.now())
    )
    instance = store.add(
        Instance(fleet_id=fleet.id, project_id=project.id, name="f-0", status="busy",
                 created_at=store.now())
    )  # fmt: skip
    run = store.add(
        Run(project_id=project.id, run_name="pull", run_type="task", spec={}, spec_hash="h",
            status="provisioning", submitted_at=store.now(), due_at=later)
    )  # fmt: skip
    job = store.add(
        Job(run_id=run.id, status="pulling", job_spec={}, submitted_at=store.now(),
            instance_id=instance.id, agent_job_id="a-1", due_at=later)
    )  # fmt: skip
    hints: list[WorkKind] = []
    events = [
        JobEvent(seq=1, job_id="a-1", kind=JobEventKind.STATE, status="pulling"),
        JobEvent(seq=2, job_id="a-1", kind=JobEventKind.STATE, status="running"),
    ]
    agent = ScriptedAgent(
        [
            JobEventsPage(epoch="e", seq=0, reset=True),
            JobEventsPage(epoch="e", seq=2, events=events),
        ]
    )
    follower = JobEventFollower(
        StoreLeasing(store.leases, make_lease=Lease), hints.append, states=store
    )
    client: AgentClient = agent  # type: ignore[assignment]  # the long-poll is all it reads
    follower.follow(instance.id, client)
    try:
        await _until(lambda: "runs" in hints)
        stored = store.get(Job, job.id)
        assert stored is not None and stored.status == "running"
        assert "jobs" in hints  # woken too: its pass reads ports, probes, logs
        woken = store.get(Job, job.id)
        assert woken is not None and woken.due_at is None  # due now
    finally:
        await follower.aclose()
        store.close()
