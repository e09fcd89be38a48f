"""An agent asked to leave answers its open long-polls at once instead of waiting them out.

The server follows each agent's job event feed with a long-poll of up to
``MAX_WAIT_SECONDS``; uvicorn's shutdown waits for every request in flight, so before the
fix a SIGTERM'd agent sat out the poll (and `stop_local_agent` SIGKILLed it after 10 s).
"""

from __future__ import annotations

import asyncio
import signal

from agent.jobevents import MAX_WAIT_SECONDS, JobEventsPage
from agent.server.events import JobEventFeed
from tests.agent.conftest import AgentProcess, wait_for

# well under MAX_WAIT_SECONDS: a poll that is not answered early misses it
DEADLINE = MAX_WAIT_SECONDS / 3


async def test_stop_answers_a_waiting_reader_and_no_later_one_waits() -> None:
    feed = JobEventFeed()
    first = feed.page(0, "")
    waiting = asyncio.create_task(feed.wait(first.seq, first.epoch, MAX_WAIT_SECONDS))
    await asyncio.sleep(0)  # the reader is parked on the feed
    assert not waiting.done()
    feed.stop()
    async with asyncio.timeout(DEADLINE):
        page = await waiting
        later = await feed.wait(first.seq, first.epoch, MAX_WAIT_SECONDS)
    assert page.events == [] and not page.reset
    assert later.events == [] and later.seq == first.seq


async def test_sigterm_answers_the_open_long_poll_and_the_agent_exits_cleanly(
    agent_process: AgentProcess,
) -> None:
    api = await agent_process.start()
    first = JobEventsPage.model_validate_json((await api.http.get("/jobs/events")).content)
    params: dict[str, str | int | float] = {
        "since": first.seq,
        "epoch": first.epoch,
        "wait": MAX_WAIT_SECONDS,
    }
    poll = asyncio.create_task(api.http.get("/jobs/events", params=params, timeout=90))
    # another request answered: the agent has read the long-poll sent before it
    (await api.http.get("/jobs")).raise_for_status()
    assert not poll.done()
    assert agent_process.process is not None
    agent_process.process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(DEADLINE):
        answer = await poll
    assert answer.status_code == 200
    assert JobEventsPage.model_validate_json(answer.content).events == []

    async def exited() -> bool:
        assert agent_process.process is not None
        return agent_process.process.poll() is not None

    await wait_for(exited, "the agent to exit", deadline=DEADLINE)
    assert agent_process.process.returncode == 0
    await api.http.aclose()
