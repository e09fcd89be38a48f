"""Agent calls per job, end to end: a burst of tasks placed together reaches the local
agent in one submissions call (a few on a loaded host), and their removals go
together once they ended.

The whole runtime (`LiveLoop`: every worker, the real local agent through its SSH server,
SQLite), with the client's two batch calls counted as they go (`AgentClient` wrapped: the
real calls still go). The figures the throughput bench reports per job
(`bench/reconcile.py`: `agent_calls_per_task_by_path`) are what this bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from agent.client import AgentClient, AgentError
from agent.protocol import JobSpec, JobState, Removals
from reconciler.adapters.db.models import Instance
from tests.engine.fixtures import LiveLoop, task_yaml

TASKS = 10


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[str]]]:
    """Each submissions and removals call the server makes, with the job ids it carries."""
    seen: dict[str, list[list[str]]] = {"submissions": [], "removals": []}
    submit_many, remove_many = AgentClient.submit_many, AgentClient.remove_many

    async def counted_submits(
        self: AgentClient, specs: Sequence[JobSpec]
    ) -> list[JobState | AgentError]:
        seen["submissions"].append([spec.id for spec in specs])
        return await submit_many(self, specs)

    async def counted_removals(self: AgentClient, job_ids: Sequence[str]) -> Removals:
        seen["removals"].append(list(job_ids))
        return await remove_many(self, job_ids)

    monkeypatch.setattr(AgentClient, "submit_many", counted_submits)
    monkeypatch.setattr(AgentClient, "remove_many", counted_removals)
    return seen


async def test_a_burst_of_tasks_costs_few_submit_and_removal_calls(
    tmp_path: Path, calls: dict[str, list[list[str]]]
) -> None:
    async with LiveLoop(tmp_path, local_job_user="self") as loop:
        # the local agent is up and its instance placeable before the burst: the burst's
        # jobs are then claimed in one batch and placed one after the other
        loop.repo.commit({"warm.dstack.yml": task_yaml("warm", "true")})
        assert (await loop.reconcile()).status == "succeeded"
        await loop.until(lambda: [r.status for r in loop.runs("warm")] == ["done"])
        await loop.until(lambda: calls["removals"] != [])
        calls["submissions"].clear()
        calls["removals"].clear()

        names = [f"burst-{i}" for i in range(TASKS)]
        loop.repo.commit({f"{n}.dstack.yml": task_yaml(n, f"echo {n}") for n in names})
        assert (await loop.reconcile()).status == "succeeded"
        await loop.until(
            lambda: all(r.status == "done" for r in loop.runs() if r.run_name in names)
        )
        await loop.until(lambda: sum(map(len, calls["removals"])) >= TASKS)

        submitted = [job for call in calls["submissions"] for job in call]
        assert len(submitted) == TASKS  # each job submitted once
        # placed one after the other, they went together: without the gather the first
        # placed went alone at once, then the others in two to five more calls ([1, 5, 4],
        # [1, 1, 1, 2, 1, 4]); with it the first carries the jobs placed meanwhile (its
        # wait is capped: on a loaded host a long placement lets the rest go in a few more
        # calls: [5, 3, 1, 1] was seen in a whole-suite run)
        sizes = [len(call) for call in calls["submissions"]]
        assert sizes[0] > 1 and len(sizes) <= TASKS // 2, sizes
        removed = [job for call in calls["removals"] for job in call]
        assert sorted(removed) == sorted(submitted)  # every one removed, once
        # their ends went in fewer calls than jobs (the gather itself, shown exactly:
        # tests/engine/test_job_removals.py)
        assert len(calls["removals"]) < TASKS, [len(c) for c in calls["removals"]]

        (warm,) = loop.store.list_jobs(loop.runs("warm")[0].id)
        instance = loop.store.get(Instance, warm.instance_id or "")
        assert instance is not None
        client = loop.controller.agents.client(instance)
        assert {job.id for job in await client.jobs()}.isdisjoint(submitted)  # left the host
