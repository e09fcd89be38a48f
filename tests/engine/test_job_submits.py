"""Placed jobs reach their host many per agent call (`JobSubmits`), against a real agent:
each caller gets its own job's state, or its own refusal."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from agent.client import AgentClient, AgentError
from agent.protocol import JobSpec, JobState, JobStatus
from reconciler.engine.workers.agent_batches import JobSubmits
from tests.agent.conftest import AgentApi, agent, agent_config  # noqa: F401


class CountingClient(AgentClient):
    """The real client, counting its submit calls."""

    calls: list[list[str]]

    async def submit_many(self, specs: Sequence[JobSpec]) -> list[JobState | AgentError]:
        self.calls.append([spec.id for spec in specs])
        return await super().submit_many(specs)


def _spec(job_id: str, **extra: object) -> JobSpec:
    return JobSpec.model_validate({"id": job_id, "run_name": job_id, "commands": ["true"]} | extra)


async def test_submits_that_come_together_go_in_one_call(agent: AgentApi) -> None:  # noqa: F811
    client = CountingClient(agent.http, name="counted")
    client.calls = []
    submits = JobSubmits()
    # a process job cannot move its port: the agent refuses that one, not the others
    moved = _spec("s-moved", ports=[{"container_port": 8000, "host_port": 9000}])
    specs = [_spec("s-1"), moved, _spec("s-2")]
    answers = await asyncio.gather(
        *(submits.submit(client, spec) for spec in specs), return_exceptions=True
    )
    assert client.calls == [["s-1", "s-moved", "s-2"]]  # one call for the three
    first, refused, second = answers
    assert isinstance(first, JobState) and isinstance(second, JobState)
    assert first.status in (JobStatus.RUNNING, JobStatus.EXITED)  # left `pending`
    assert isinstance(refused, AgentError) and "host_port" in refused.message
    assert refused.status_code == 422
    for job_id in ("s-1", "s-2"):
        assert (await agent.wait_finished(job_id)).exit_status == 0
    assert (await agent.http.get("/jobs/s-moved")).status_code == 404  # never created
    again = await submits.submit(client, _spec("s-1"))  # alone now: its own call
    assert again.id == "s-1" and client.calls[-1] == ["s-1"]  # idempotent, as POST /jobs


async def test_submits_wait_for_the_gather_and_go_together(agent: AgentApi) -> None:  # noqa: F811
    """A submit waits for `gather` (the jobs worker's: the placements under way) before
    its call goes: the jobs placed meanwhile go with it. Without it the first placed job
    went alone at once."""
    client = CountingClient(agent.http, name="counted")
    client.calls = []
    placing = asyncio.Event()  # set: the placements under way are done
    submits = JobSubmits(gather=placing.wait)
    first = asyncio.create_task(submits.submit(client, _spec("p-1")))
    await asyncio.sleep(0)  # its sender runs and waits for the placements
    second = asyncio.create_task(submits.submit(client, _spec("p-2")))
    await asyncio.sleep(0)
    assert client.calls == []
    placing.set()
    answers = await asyncio.gather(first, second)
    assert client.calls == [["p-1", "p-2"]]
    assert [a.id for a in answers] == ["p-1", "p-2"]
    for job_id in ("p-1", "p-2"):
        assert (await agent.wait_finished(job_id)).exit_status == 0


async def test_a_batch_over_the_limit_is_refused_whole(agent: AgentApi) -> None:  # noqa: F811
    client = AgentClient(agent.http, name="plain")
    with pytest.raises(ValueError):  # the client bounds it before sending
        await client.submit_many([_spec(f"x-{i}") for i in range(101)])
    response = await agent.http.post("/jobs/submissions", json={"jobs": []})
    assert response.status_code == 422  # and the agent bounds what it is sent


async def test_a_job_named_twice_in_one_call_is_submitted_once(agent: AgentApi) -> None:  # noqa: F811
    client = AgentClient(agent.http, name="plain")
    first, again = await client.submit_many([_spec("twice"), _spec("twice")])
    assert isinstance(first, JobState) and isinstance(again, JobState)
    assert first.id == again.id == "twice"
    assert [job.id for job in await client.jobs()].count("twice") == 1
