"""A tiny task's passes on the real local agent: its start told by its submit's answer, its
end by the agent's end event (state and log), nothing asked twice.

The workers are stepped by the harness; the job event follower is the server's own
(`JobEventFollower`), following the module's real agent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.client import AgentClient
from agent.protocol import JobState
from reconciler.adapters.db.models import Job, Run
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.jobevents import JobEventFollower
from reconciler.engine.worker import Lease
from tests.e2e.runs_harness import Harness

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def followed(h: Harness) -> AsyncIterator[JobEventFollower]:
    """The harness's agent followed, as the controller wires it (`EngineController`)."""
    follower = JobEventFollower(
        StoreLeasing(h.store.leases, make_lease=Lease), lambda kind: None, states=h.store
    )
    h.agents.on_client = follower.follow
    h.agents.following = follower.following
    h.agents.events = follower
    h.agents.client(h.instance)  # followed from now on
    await h.until(lambda: follower.following(h.instance.id))
    yield follower
    await follower.aclose()


def _count_state_and_log_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The agent client's `job` and `logs` calls from now on (the real calls, counted)."""
    asked: list[str] = []
    for name in ("job", "logs"):
        real = getattr(AgentClient, name)

        async def counted(self: AgentClient, *args: Any, _real: Any = real, **kw: Any) -> Any:
            answer = await _real(self, *args, **kw)
            ended = isinstance(answer, JobState) and answer.status.is_finished()
            asked.append(_real.__name__ + (" (ended)" if ended else ""))
            return answer

        monkeypatch.setattr(AgentClient, name, counted)
    return asked


async def test_a_tiny_tasks_end_is_recorded_from_its_end_event(
    h: Harness, followed: JobEventFollower, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _count_state_and_log_calls(monkeypatch)
    run = h.submit("type: task\nname: tiny\ncommands: ['echo tiny output; exit 4']\n")
    await h.until(lambda: h.run(run.id).status == "failed")
    [job] = h.jobs_of(run.id)
    assert job.termination_reason == "container_exited_with_error" and job.exit_status == 4
    assert h.log_text(run) == "tiny output\n"
    assert asked == []  # neither its state nor its log was asked for: the event told both
    # removed from the host: after its pass, with the others ending there (`JobRemovals`)
    client = h.agents.client(h.instance)
    deadline = time.monotonic() + 10
    while job.agent_job_id in {j.id for j in await client.jobs()}:
        assert time.monotonic() < deadline, "the finished job was not removed from its host"
        await asyncio.sleep(0.05)


async def test_a_wake_that_came_while_the_job_was_placed_is_used_by_its_placement(
    h: Harness,
) -> None:
    # Room made while a job waits for its placement wakes the first in line: that job. Once
    # placed it has used the wake; its pass must not run again right after the submit.
    run = h.submit("type: task\nname: placed\ncommands: ['sleep 60']\n")
    while not h.jobs_of(run.id):  # the runs worker alone: the job is written, not placed
        await h.runs.process_once()
    [lease] = await h.jobs.claim()
    assert h.store.leases.make_due(Job, lease.row_id)  # the wake, while in hand
    await h.jobs._process_one(lease)  # placed, submitted, released
    [job] = h.jobs_of(run.id)
    assert job.status == "running"
    assert job.due_at is not None and job.last_processed_at is not None
    assert job.due_at > job.last_processed_at  # its next pass, not now


async def test_a_stopped_jobs_end_is_recorded_from_its_end_event_too(
    h: Harness, followed: JobEventFollower, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its end is not left behind in the follower either (it would be kept until 10,000
    # others): the pass that removes a finished job drops an end it did not use.
    # The job ignores SIGTERM, so the stop's own pass finds it still running; it ends only
    # when the test kills it (a forced stop) after that pass, and its end event wakes the
    # pass that records it. (Otherwise the stop's pass may itself see it ended: a race.)
    run = h.submit(
        "type: task\nname: stopped\ncommands: [\"trap '' TERM; echo started; sleep 600\"]\n"
    )
    await h.until(lambda: h.run(run.id).status == "running" and "started" in h.log_text(run))
    asked = _count_state_and_log_calls(monkeypatch)
    h.store.update(
        Run, run.id, status="terminating", termination_reason="stopped_by_user", due_at=None
    )
    [job] = h.jobs_of(run.id)
    await h.until(lambda: bool(h.jobs_of(run.id)[0].runtime.get("stop_sent")))
    assert "job (ended)" not in asked  # the stop's pass: it still runs
    job_id = job.agent_job_id or job.id
    await h.agents.client(h.instance).stop(job_id, grace=0, force=True)
    # the workers are not stepped until its end event is here: a pass woken before (by the
    # stop order's event) would find the job ended by asking, as it should
    deadline = time.monotonic() + 30
    while not followed.holds_end(h.instance.id, job_id):
        assert time.monotonic() < deadline, "no end event from the agent"
        await asyncio.sleep(0.02)
    await h.until(lambda: h.run(run.id).status == "terminated", within=60)
    [job] = h.jobs_of(run.id)
    assert job.termination_reason == "terminated_by_user"
    assert h.log_text(run).startswith("started\n")
    # The passes before its end may ask (the stop's, one woken by the stop order's event);
    # the pass that records the end asks nothing: its end event told it.
    assert "job (ended)" not in asked
    assert not followed.holds_end(h.instance.id, job_id)  # not kept


async def test_a_task_started_by_its_submit_is_looked_at_by_its_first_duty(
    h: Harness, followed: JobEventFollower
) -> None:
    # Its start event wakes no one (the submit's answer told it): its `max_duration` must
    # not wait for the event poll (600 s) to end it.
    run = h.submit("type: task\nname: limited\nmax_duration: 2\ncommands: ['sleep 600']\n")
    await h.until(lambda: h.run(run.id).status in ("failed", "terminated"), within=60)
    [job] = h.jobs_of(run.id)
    assert job.termination_reason == "max_duration_exceeded"
