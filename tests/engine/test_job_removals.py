"""Finished jobs leave their hosts many per agent call (`JobRemovals`), against a real agent."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

import httpx
import pytest

from agent.client import AgentClient
from agent.protocol import Removals
from agent.tunnel import AgentUnreachable
from reconciler.engine.workers.agent_batches import JobRemovals
from tests.agent.conftest import AgentApi, agent, agent_config  # noqa: F401


class CountingClient(AgentClient):
    """The real client, counting its removal calls."""

    calls: list[list[str]]

    async def remove_many(self, job_ids: Sequence[str]) -> Removals:
        self.calls.append(list(job_ids))
        return await super().remove_many(job_ids)


async def test_removals_that_come_together_go_in_one_call(agent: AgentApi) -> None:  # noqa: F811
    ids = ["r-1", "r-2", "r-3"]
    for job_id in ids:
        (await agent.submit(id=job_id, commands=["true"])).raise_for_status()
    for job_id in ids:
        await agent.wait_finished(job_id)
    client = CountingClient(agent.http, name="counted")
    client.calls = []
    removals = JobRemovals()
    await asyncio.gather(*(removals.remove(client, job_id) for job_id in ids))
    assert client.calls == [ids]  # one call for the three
    for job_id in ids:
        assert (await agent.http.get(f"/jobs/{job_id}")).status_code == 404
    await removals.remove(client, "r-1")  # alone now: a call of its own (gone: no error)
    assert client.calls == [ids, ["r-1"]]


async def test_removals_that_come_within_the_gather_go_in_one_call(agent: AgentApi) -> None:  # noqa: F811
    """A removal waits `gather` seconds for others to its host: one that comes after the
    first was asked for, while nothing was sent yet, goes in the same call (jobs whose
    passes end a moment apart; without the gather the first went alone)."""
    ids = ["g-1", "g-2", "g-3"]
    for job_id in ids:
        (await agent.submit(id=job_id, commands=["true"])).raise_for_status()
    for job_id in ids:
        await agent.wait_finished(job_id)
    client = CountingClient(agent.http, name="counted")
    client.calls = []
    removals = JobRemovals(gather=30.0)  # longer than the test: what ends it is below
    first = asyncio.create_task(removals.remove(client, "g-1"))
    await asyncio.sleep(0)  # the first removal's sender runs: now in its gather
    later = [asyncio.create_task(removals.remove(client, job_id)) for job_id in ids[1:]]
    await asyncio.sleep(0)
    assert client.calls == []  # nothing sent while it gathers
    await removals.aclose()  # a shutdown cancels what was not sent: its files stay
    for task in (first, *later):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert client.calls == []
    quick = JobRemovals(gather=0.01)
    first = asyncio.create_task(quick.remove(client, "g-1"))
    await asyncio.sleep(0)
    await asyncio.gather(first, *(quick.remove(client, job_id) for job_id in ids[1:]))
    assert client.calls == [ids]  # the three in one call, the first having waited
    for job_id in ids:
        assert (await agent.http.get(f"/jobs/{job_id}")).status_code == 404


async def test_each_caller_gets_its_calls_failure() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/api/v1", timeout=5)
    client = AgentClient(http, name="gone")
    removals = JobRemovals()
    try:
        results = await asyncio.gather(
            removals.remove(client, "a"), removals.remove(client, "b"), return_exceptions=True
        )
        assert all(isinstance(r, AgentUnreachable) for r in results)
        with pytest.raises(AgentUnreachable):  # and the next one tries again
            await removals.remove(client, "c")
    finally:
        await removals.aclose()
        await http.aclose()
