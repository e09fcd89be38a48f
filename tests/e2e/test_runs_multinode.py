"""A multi-node task on a two-agent `placement: cluster` fleet gets dstack's DSTACK_* env."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reconciler.adapters.db.models import Fleet
from tests.e2e.runs_harness import (
    Harness,
    close_harness,
    make_harness,
    start_agent_env,
    stop_agent_env,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Harness]:
    first = await start_agent_env(tmp_path / "agent-a")
    second = await start_agent_env(tmp_path / "agent-b", key=first.key)
    h = await make_harness(tmp_path, first)
    try:
        fleet = h.store.add(
            Fleet(
                project_id=h.project.id,
                name="cluster",
                spec={"type": "fleet", "placement": "cluster"},
                status="active",
                created_at=h.store.now(),
            )
        )
        await h.add_instance(first, fleet, "cluster-0")
        await h.add_instance(second, fleet, "cluster-1")
        yield h
    finally:
        await close_harness(h)
        stop_agent_env(second)
        stop_agent_env(first)


async def test_two_node_task_gets_ranks_and_cluster_env(cluster: Harness) -> None:
    h = cluster
    run = h.submit(
        """
type: task
name: ddp
nodes: 2
commands:
  - echo "rank=$DSTACK_NODE_RANK of=$DSTACK_NODES_NUM master=$DSTACK_MASTER_NODE_IP"
  - echo "ips=$(echo "$DSTACK_NODES_IPS" | tr '\\n' ',')"
"""
    )
    await h.until(lambda: h.run(run.id).status == "done", within=60)
    jobs = h.jobs_of(run.id)
    assert sorted(j.job_num for j in jobs) == [0, 1]
    instances = {j.instance_id for j in jobs}
    assert len(instances) == 2, "each node runs on its own instance of the cluster fleet"
    assert h.fleet.id not in {h.store.get(type(h.instance), i).fleet_id for i in instances}  # type: ignore[union-attr]
    text = h.log_text(run)
    assert "rank=0 of=2 master=127.0.0.1" in text
    assert "rank=1 of=2 master=127.0.0.1" in text
    assert "ips=127.0.0.1,127.0.0.1," in text


async def test_multi_node_needs_a_cluster_fleet(tmp_path: Path) -> None:
    env = await start_agent_env(tmp_path / "agent")
    h = await make_harness(tmp_path, env)
    try:
        run = h.submit("type: task\nname: ddp\nnodes: 2\ncommands: ['true']\n")
        await h.until(lambda: h.run(run.id).status == "failed")
        job = next(j for j in h.jobs_of(run.id) if j.job_num == 0)
        assert "placement: cluster" in job.status_message
    finally:
        await close_harness(h)
        stop_agent_env(env)
