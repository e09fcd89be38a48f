"""The agent's job event feed (``GET /jobs/events``): a long-poll of job state changes and
log growth, so the server learns of them without polling each job."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent.client import AgentClient
from agent.jobevents import END_LOG_BYTES, JobEvent, JobEventKind, JobEventsPage
from agent.protocol import MAX_REMOVALS, JobState, JobStatus
from agent.server.events import JobEventFeed, settled
from tests.agent.conftest import AgentApi


async def _page(agent: AgentApi, since: int, epoch: str, wait: float = 0) -> JobEventsPage:
    response = await agent.http.get(
        "/jobs/events", params={"since": since, "epoch": epoch, "wait": wait}
    )
    response.raise_for_status()
    return JobEventsPage.model_validate_json(response.content)


async def test_a_reader_follows_a_jobs_states_and_its_output(
    agent: AgentApi, tmp_path: Path
) -> None:
    first = await _page(agent, 0, "")
    assert first.reset and first.events == []  # a new reader: it cannot know what it missed
    go = tmp_path / "go"
    waiting = asyncio.create_task(_page(agent, first.seq, first.epoch, wait=30))
    await agent.submit(id="ev", commands=[f"while [ ! -e {go} ]; do sleep 0.05; done; echo hi"])
    page = await waiting  # answered as soon as something happened, not after 30 s
    assert page.events and page.events[0].job_id == "ev"
    seen = list(page.events)
    since = page.seq
    go.touch()
    while not any(e.status == "exited" for e in seen):
        page = await _page(agent, since, first.epoch, wait=30)
        assert not page.reset
        seen += page.events
        since = page.seq
    states = [e.status for e in seen if e.kind is JobEventKind.STATE]
    assert states[-1] == "exited" and "running" in states
    assert [e.seq for e in seen] == sorted({e.seq for e in seen})  # in order, none twice


async def test_a_reader_of_another_agent_or_too_far_behind_is_told_to_reset() -> None:
    feed = JobEventFeed(keep=3)
    for i in range(5):
        feed.publish(f"j{i}", JobEventKind.STATE, "running")
    assert feed.page(0, "other-epoch").reset
    assert feed.page(1, feed.epoch).reset  # events 2..5 were asked for; only 3..5 are kept
    kept = feed.page(2, feed.epoch)
    assert not kept.reset and [e.job_id for e in kept.events] == ["j2", "j3", "j4"]
    assert kept.seq == 5
    assert feed.page(5, feed.epoch).events == []
    assert feed.page(9, feed.epoch).reset  # ahead of this agent: another agent's numbers


async def test_output_events_are_published_when_a_running_log_grows(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"")
    feed = JobEventFeed(running_logs=lambda: [("job", log)])
    feed.check_output()
    assert feed.seq == 0  # nothing written yet
    log.write_bytes(b"line\n")
    feed.check_output()
    feed.check_output()  # unchanged since: no second event
    page = feed.page(0, feed.epoch)
    assert [(e.job_id, e.kind) for e in page.events] == [("job", JobEventKind.OUTPUT)]


async def test_a_submit_answers_once_the_job_left_pending(agent: AgentApi, tmp_path: Path) -> None:
    # A process job starts within milliseconds: the answer says `running` (or, for a job
    # that already ended, `exited`), so the server records it from the submit itself.
    go = tmp_path / "go"
    response = await agent.submit(
        id="settle", commands=[f"while [ ! -e {go} ]; do sleep 0.05; done"]
    )
    response.raise_for_status()
    assert JobState.model_validate_json(response.content).status is JobStatus.RUNNING
    go.touch()


async def test_settled_gives_up_after_its_window() -> None:
    feed = JobEventFeed()
    ticks = iter([0.0, 0.99, 1.2])
    pending = JobState(id="j", status=JobStatus.PENDING)
    state = await settled(feed, lambda: pending, within=1.0, clock=lambda: next(ticks))
    assert state.status is JobStatus.PENDING  # still pending after the window: answered so


async def test_settled_wakes_on_the_jobs_change() -> None:
    feed = JobEventFeed()
    states = [JobState(id="j", status=JobStatus.PENDING)]
    waiting = asyncio.create_task(settled(feed, lambda: states[-1], within=60))
    await asyncio.sleep(0)  # let it look once and wait
    states.append(JobState(id="j", status=JobStatus.PULLING))
    feed.publish("j", JobEventKind.STATE, "pulling")
    assert (await asyncio.wait_for(waiting, timeout=30)).status is JobStatus.PULLING


async def _events_until_finished(agent: AgentApi, job_ids: set[str]) -> dict[str, JobEvent]:
    """Follow the feed until each of `job_ids` has its end event; those events by job."""
    first = await _page(agent, 0, "")
    since, ended = first.seq, dict[str, JobEvent]()
    while set(ended) != job_ids:
        page = await _page(agent, since, first.epoch, wait=30)
        assert not page.reset
        ended |= {e.job_id: e for e in page.events if e.end is not None}
        since = page.seq
    return ended


async def test_a_jobs_end_event_carries_its_state_and_its_short_log(
    agent: AgentApi, tmp_path: Path
) -> None:
    # The server records a tiny task's end from this event alone: no state or log asked.
    go = tmp_path / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.05; done"
    long_line = "x" * END_LOG_BYTES
    for job_id, command in (
        ("short", "printf 'hi\\377\\n'; exit 3"),
        ("long", f"echo {long_line}"),
    ):
        (await agent.submit(id=job_id, commands=[wait, command])).raise_for_status()
    following = asyncio.create_task(_events_until_finished(agent, {"short", "long"}))
    go.touch()
    ended = await following
    short = ended["short"].end
    assert short is not None and short.state.status is JobStatus.EXITED
    assert short.state.exit_status == 3 and short.log == b"hi\xff\n"  # bytes as written
    assert short.state == await agent.state("short")
    long = ended["long"].end
    assert long is not None and long.state.exit_status == 0
    assert long.log is None  # longer than END_LOG_BYTES: read with GET /jobs/{id}/logs
    assert ended["short"].status == "exited"


async def test_output_before_a_jobs_first_look_is_news_at_its_next_look(tmp_path: Path) -> None:
    # A job that prints and ends between two looks brings its log with its end: an output
    # event for it would only cost the server a pass. One that still runs gets it then.
    log = tmp_path / "output.log"
    log.write_bytes(b"printed at once\n")
    running = [("job", log)]
    feed = JobEventFeed(running_logs=lambda: running)
    feed.check_output()
    assert feed.seq == 0  # its first look: not news yet
    feed.check_output()  # still running, quiet since: what it printed is news now
    page = feed.page(0, feed.epoch)
    assert [(e.job_id, e.kind) for e in page.events] == [("job", JobEventKind.OUTPUT)]
    feed.check_output()
    assert feed.seq == 1  # nothing new
    ended = tmp_path / "ended.log"
    ended.write_bytes(b"tiny\n")
    running[:] = [("tiny", ended)]
    feed.check_output()
    running.clear()  # it ended before the next look: its end event carries its log
    feed.check_output()
    assert feed.seq == 1


async def test_removals_remove_finished_jobs_and_leave_running_ones(
    agent: AgentApi, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    (await agent.submit(id="ended", commands=["true"])).raise_for_status()
    (await agent.submit(id="runs", commands=[f"while [ ! -e {go} ]; do sleep 0.05; done"]))
    await agent.wait_finished("ended")
    await agent.wait_status("runs", JobStatus.RUNNING)
    client = AgentClient(agent.http, name="test")
    removals = await client.remove_many(["ended", "runs", "unknown", "ended"])
    assert removals.removed == ["ended", "unknown"]  # unknown: gone either way
    assert removals.active == ["runs"]
    assert (await agent.http.get("/jobs/ended")).status_code == 404
    assert (await agent.state("runs")).status is JobStatus.RUNNING
    go.touch()
    await agent.wait_finished("runs")
    assert (await client.remove_many(["runs"])).removed == ["runs"]
    too_many = [f"j{i}" for i in range(MAX_REMOVALS + 1)]
    response = await agent.http.post("/jobs/removals", json={"job_ids": too_many})
    assert response.status_code == 422


async def test_a_woken_long_poll_takes_what_comes_just_after_in_the_same_page() -> None:
    feed = JobEventFeed(linger=1.0)  # long enough: the test's own steps fit in it
    waiting = asyncio.create_task(feed.wait(0, feed.epoch, wait=60))
    await asyncio.sleep(0)  # it looks, finds nothing and waits
    feed.publish("a", JobEventKind.STATE, "exited")
    for _ in range(3):  # the waiter is woken and lingers
        await asyncio.sleep(0)
    assert not waiting.done()
    feed.publish("b", JobEventKind.STATE, "exited")
    page = await asyncio.wait_for(waiting, timeout=30)
    assert [e.job_id for e in page.events] == ["a", "b"]  # one answer for both


async def test_a_long_poll_with_news_when_asked_answers_at_once() -> None:
    feed = JobEventFeed(linger=60.0)
    feed.publish("a", JobEventKind.STATE, "exited")
    page = await asyncio.wait_for(feed.wait(0, feed.epoch, wait=60), timeout=30)
    assert [e.job_id for e in page.events] == ["a"]
