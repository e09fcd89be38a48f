"""The server's job event follower: an agent's "job started" is recorded `running` in the
store at once (`Store.record_agent_running`), and every job the page names is woken; a
job's end is kept for its pass, and a start its submit's answer tells wakes no one.

The agent's long-poll is played by a scripted client (its pages as the real agent serves
them: tests/agent/test_job_events.py); the store is real (SQLite).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent.client import AgentClient
from agent.jobevents import JobEnd, JobEvent, JobEventKind, JobEventsPage
from agent.protocol import JobState
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


class RecordedWakes:
    """The store's wakes as the follower calls them, recorded (what it asked to wake)."""

    def __init__(self) -> None:
        self.woken: list[str] = []
        self.everything = 0

    async def wake(self, kind: WorkKind, row_ids: Sequence[str]) -> int:
        self.woken.extend(row_ids)
        return len(row_ids)

    async def wake_jobs_on_instance(self, instance_id: str) -> int:
        self.everything += 1
        return 0


class RecordedStates:
    def __init__(self) -> None:
        self.started: list[str] = []

    def record_agent_running(self, instance_id: str, agent_job_ids: Sequence[str]) -> list[str]:
        self.started.extend(agent_job_ids)
        return []


def _state(job_id: str, status: str) -> JobEvent:
    return JobEvent(seq=0, job_id=job_id, kind=JobEventKind.STATE, status=status)


async def test_an_end_is_kept_for_its_jobs_pass_and_a_start_its_submit_tells_wakes_no_one() -> None:
    end = JobEnd(state=JobState(id="tiny", status="exited", exit_status=0), log=b"x\n")
    pages = [
        JobEventsPage(epoch="e", seq=0, reset=True),
        JobEventsPage(
            epoch="e",
            seq=4,
            events=[
                _state("tiny", "running"),  # its submit's answer says it started
                _state("late", "running"),  # answered `pulling`: the start is news to it
                _state("other", "running"),  # no submit in flight: recorded and woken
                _state("tiny", "exited").model_copy(update={"end": end}),
            ],
        ),
    ]
    wakes, states = RecordedWakes(), RecordedStates()
    follower = JobEventFollower(wakes, lambda kind: None, states=states)
    follower.submitting("i-1", "tiny")
    follower.submitting("i-1", "late")
    client: AgentClient = ScriptedAgent(pages)  # type: ignore[assignment]
    follower.follow("i-1", client)
    try:
        await _until(lambda: bool(wakes.woken))
        assert wakes.woken == ["other", "tiny"]  # tiny: for its end only
        assert states.started == ["other"]
        assert follower.submitted("i-1", "tiny", started=True) is False
        assert follower.submitted("i-1", "late", started=False) is True  # look again now
        assert follower.ended("i-1", "tiny") == end
        assert follower.ended("i-1", "tiny") is None  # taken: a later pass asks the agent
        assert follower.ended("i-2", "tiny") is None  # another host's job of that id
    finally:
        await follower.aclose()


async def test_a_start_after_its_submits_answer_is_no_news_either() -> None:
    pages = [
        JobEventsPage(epoch="e", seq=0, reset=True),
        JobEventsPage(epoch="e", seq=1, events=[_state("tiny", "running")]),
        JobEventsPage(epoch="e", seq=2, events=[_state("tiny", "running")]),  # stop order moved
    ]
    wakes, states = RecordedWakes(), RecordedStates()
    follower = JobEventFollower(wakes, lambda kind: None, states=states)
    follower.submitting("i-1", "tiny")
    assert follower.submitted("i-1", "tiny", started=True) is False  # answered first
    client: AgentClient = ScriptedAgent(pages)  # type: ignore[assignment]
    follower.follow("i-1", client)
    try:
        await _until(lambda: bool(wakes.woken))
        assert wakes.woken == ["tiny"] and states.started == ["tiny"]  # the second is news
    finally:
        await follower.aclose()


class RecordingAgent(ScriptedAgent):
    """A scripted agent that notes, in `trace`, each poll and each pause between them."""

    def __init__(self, pages: list[JobEventsPage], trace: list[str]) -> None:
        super().__init__(pages)
        self.trace = trace

    async def job_events(self, since: int, epoch: str, *, wait: float) -> JobEventsPage:
        self.trace.append(f"poll after {since}")
        return await super().job_events(since, epoch, wait=wait)


async def test_after_a_page_with_events_the_next_poll_waits_the_gap() -> None:
    """In a burst the agent answers each poll at once with what it has: the follower
    pauses `gap` after a page that had events, so the next page carries what came
    meanwhile; after a page without events (a reset, a quiet wait) it polls again at
    once."""
    trace: list[str] = []

    async def sleep(seconds: float) -> None:
        trace.append(f"pause {seconds}")

    def ended(seq: int) -> JobEvent:
        return JobEvent(seq=seq, job_id=f"a-{seq}", kind=JobEventKind.STATE, status="exited")

    agent = RecordingAgent(
        [
            JobEventsPage(epoch="e", seq=0, reset=True),
            JobEventsPage(epoch="e", seq=1, events=[ended(1)]),
            JobEventsPage(epoch="e", seq=3, events=[ended(2), ended(3)]),
            JobEventsPage(epoch="e", seq=3),  # a long-poll that timed out: no news
        ],
        trace,
    )
    follower = JobEventFollower(RecordedWakes(), lambda kind: None, gap=0.02, sleep=sleep)
    client: AgentClient = agent  # type: ignore[assignment]  # the long-poll is all it reads
    follower.follow("i-1", client)
    try:
        await _until(lambda: trace.count("poll after 3") == 2)
    finally:
        await follower.aclose()
    assert trace == [
        "poll after 0",
        "poll after 0",  # the reset page: no pause
        "pause 0.02",
        "poll after 1",
        "pause 0.02",
        "poll after 3",
        "poll after 3",  # the page without news: no pause
    ]


class BrokenStates:
    """The store failing a page's write for another reason than refusing it (a bug)."""

    def __init__(self) -> None:
        self.calls = 0

    def record_agent_running(self, instance_id: str, agent_job_ids: Sequence[str]) -> list[str]:
        self.calls += 1
        raise ValueError("not a refusal")


async def test_a_write_that_fails_without_a_refusal_wakes_every_job_and_goes_on() -> None:
    """Not retried for ever, holding the host's feed (a refusal is: tests/engine/
    test_store_refusals.py): the page is passed over, every job there woken instead (each
    pass asks the agent), and the next page's news is recorded."""
    pages = [
        JobEventsPage(epoch="e", seq=0, reset=True),
        JobEventsPage(epoch="e", seq=1, events=[_state("a-1", "running")]),
        JobEventsPage(epoch="e", seq=2, events=[_state("a-2", "exited")]),
    ]
    wakes, states = RecordedWakes(), BrokenStates()
    follower = JobEventFollower(
        wakes, lambda kind: None, states=states, store_failure=lambda exc: False
    )
    client: AgentClient = ScriptedAgent(pages)  # type: ignore[assignment]
    follower.follow("i-1", client)
    try:
        await _until(lambda: "a-2" in wakes.woken, within=10)
        assert states.calls == 1  # tried once, not again and again
        assert wakes.everything == 2  # the reset page's wake, then the one instead of a-1's
    finally:
        await follower.aclose()


class InstancesSeen(RecordedStates):
    def __init__(self) -> None:
        super().__init__()
        self.instances: list[tuple[str, ...]] = []

    def record_agent_running(self, instance_id: Any, agent_job_ids: Sequence[str]) -> list[str]:
        self.instances.append(tuple(instance_id))
        return super().record_agent_running(instance_id, agent_job_ids)


async def test_one_agent_serving_many_instances_is_read_by_one_feed() -> None:
    """Every project's local fleet is an instance of the one local agent (50 sources: 50):
    one long-poll reads it, each page's wakes and starts are written once for all of
    them, and each instance's jobs find their ends; a feed per instance read every page
    N times and wrote its wakes N times (webhook -> running p50 9.3 s at 50 sources)."""
    end = JobEnd(state=JobState(id="b-job", status="exited", exit_status=0), log=b"x\n")
    pages = [
        JobEventsPage(epoch="e", seq=0, reset=True),
        JobEventsPage(
            epoch="e",
            seq=2,
            events=[
                _state("a-job", "running"),
                _state("b-job", "exited").model_copy(update={"end": end}),
            ],
        ),
    ]
    agent = ScriptedAgent(pages)
    wakes, states = RecordedWakes(), InstancesSeen()
    follower = JobEventFollower(wakes, lambda kind: None, states=states)
    client: AgentClient = agent  # type: ignore[assignment]
    for instance in ("i-a", "i-b", "i-c"):
        follower.follow(instance, client)
    try:
        await _until(lambda: bool(wakes.woken))
        assert wakes.woken == ["a-job", "b-job"]  # once, not once per instance
        assert states.instances == [("i-a", "i-b", "i-c")]  # one write for all three
        assert wakes.everything == 3  # the reset page: each instance's jobs looked at
        assert all(follower.following(i) for i in ("i-a", "i-b", "i-c"))
        assert follower.ended("i-b", "b-job") == end
    finally:
        await follower.aclose()
