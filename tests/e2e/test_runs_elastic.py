"""An empty `nodes: 0..1` cloud fleet grows for a task, runs it on a real agent, and
shrinks back to 0 after `idle_duration`: the real runs, jobs, fleets and instances
workers; the cloud is a double at the stacks seam whose instance is a real local agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.db.models import Fleet, Instance
from schemas import parse_config
from tests.e2e.runs_harness import AgentEnv, Harness, close_harness, make_harness
from tests.engine.cloud_double import CloudDouble

pytestmark = pytest.mark.timeout(120)

FLEET = """
type: fleet
name: cloud
nodes: 0..1
backends: [aws]
idle_duration: 1s
"""


@pytest.fixture
async def cloud(tmp_path: Path, agent_env: AgentEnv) -> AsyncIterator[tuple[Harness, CloudDouble]]:
    def where(index: int) -> dict[str, Any]:
        target = agent_env.local.target
        return {
            "hostname": target.hostname,
            "port": target.port,
            "user": target.user,
            "agent_port": agent_env.local.agent_port,
        }

    double = CloudDouble(where)
    h = await make_harness(
        tmp_path,
        agent_env,
        engines={"pulumi": double},
        fleet_check_interval=0.1,
        instance_check_interval=0.2,
    )
    try:
        yield h, double
    finally:
        await close_harness(h)


async def test_an_empty_fleet_grows_runs_the_task_and_shrinks_back(
    cloud: tuple[Harness, CloudDouble],
) -> None:
    h, double = cloud
    spec = parse_config(FLEET, "fleets/cloud.dstack.yml").normalized()
    fleet = h.store.add(
        Fleet(
            project_id=h.project.id,
            name="cloud",
            spec=spec,
            status="submitted",
            created_at=h.store.now(),
        )
    )

    def fleet_status() -> str:
        row = h.store.get(Fleet, fleet.id)
        return row.status if row is not None else "?"

    def nodes() -> list[Instance]:
        live = ["pending", "provisioning", "idle", "busy", "terminating"]
        return h.store.list_instances(fleet_id=fleet.id, statuses=live)

    await h.until(lambda: fleet_status() == "active")
    assert nodes() == [] and double.ups == [0]

    run = h.submit(
        "type: task\nname: grow\nfleets: [cloud]\ncommands:\n  - echo grown-node-says-hi\n"
    )
    await h.until(lambda: h.run(run.id).status == "done", within=60)
    (job,) = h.jobs_of(run.id)
    grown = h.store.get(Instance, job.instance_id or "")
    assert grown is not None and (grown.name, grown.backend) == ("cloud-0", "aws")
    assert double.ups[:2] == [0, 1]
    assert "grown-node-says-hi" in h.log_text(run)
    events = [e.message for e in h.store.list_events(target_type="fleet")]
    assert "fleet cloud: growing 0 → 1 nodes for run grow" in events

    await h.until(lambda: nodes() == [], within=30)
    assert double.size["main-fleet-cloud"] == 0
    assert double.ups[-1] == 0
    ended = h.store.get(Instance, grown.id)
    assert ended is not None
    assert (ended.status, ended.termination_reason) == ("terminated", "idle_timeout")
    events = [e.message for e in h.store.list_events(target_type="fleet")]
    assert any(m.startswith("fleet cloud: shrinking 1 → 0 nodes") for m in events)
