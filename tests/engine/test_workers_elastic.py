"""A `nodes: 0..2` cloud fleet grows for waiting jobs and shrinks when idle: the real jobs,
fleets and instances workers on a real SQLite store, a cloud double at the stacks seam."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.tunnel import TunnelPool
from reconciler.adapters.db.models import Fleet, Instance, Job, Run
from reconciler.adapters.db.store import Store
from reconciler.domain.plan import Action, ActionKind, Kind
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.previewing import placement_warnings
from reconciler.engine.worker import Process, ProcessResult
from reconciler.engine.workers import WorkerDeps, WorkerTimings, fleets, instances, jobs
from schemas import parse_config
from tests.engine.cloud_double import CloudDouble

FLEET = """
type: fleet
name: gpu
nodes: 0..2
backends: [aws]
idle_duration: 60
resources:
  gpu: A100:80GB:1
"""
A100_HOST = {
    "cpus": 8,
    "arch": "x86_64",
    "memory_mib": 64 * 1024,
    "disk_mib": 200 * 1024,
    "gpus": [{"index": 0, "name": "A100", "vendor": "nvidia", "memory_mib": 80 * 1024}],
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def now_ts(self) -> float:
        return self.now


class Rig:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        self.cloud = CloudDouble()
        self.hints: list[str] = []
        store = Store.from_url(
            f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True, clock=self.clock
        )
        self.deps = WorkerDeps(
            store=store,
            clock=self.clock,
            hint=self.hints.append,
            agents=AgentDirectory(TunnelPool(), identity_file=None),
            data_dir=tmp_path / "data",
            engines={"pulumi": self.cloud},
            timings=WorkerTimings(),
        )
        self.store = store
        self.project = store.get_or_create_project("main")
        spec = parse_config(FLEET, "fleets/gpu.dstack.yml").normalized()
        self.fleet_id = store.add(
            Fleet(
                project_id=self.project.id,
                name="gpu",
                spec=spec,
                status="submitted",
                created_at=store.now(),
            )
        ).id
        self.jobs = jobs.make_process(self.deps)
        self.job_ids: list[str] = []
        self.fleets = fleets.make_process(self.deps)

    async def step(self, model: type, process: Process, row_id: str) -> ProcessResult:
        """Lease exactly this row (as a worker would) and process it once."""
        ((claimed, token),) = self.store.leases.claim_due(
            model, owner="t", limit=1, lease_seconds=30, where=model.id == row_id
        )
        try:
            return await process(claimed, token)
        finally:
            self.store.leases.release(model, claimed, token)

    async def fleet_pass(self) -> ProcessResult:
        self.store.leases.make_due(Fleet, self.fleet_id)
        return await self.step(Fleet, self.fleets, self.fleet_id)

    async def job_pass(self, job_id: str) -> Job:
        self.store.leases.make_due(Job, job_id)
        await self.step(Job, self.jobs, job_id)
        return self.job(job_id)

    def submit(self, name: str, resources: str = "gpu: A100:1") -> str:
        text = f"type: task\nname: {name}\ncommands: [train]\nresources:\n  {resources}\n"
        spec = parse_config(text, f"{name}.dstack.yml").normalized()
        run = self.store.add(
            Run(
                project_id=self.project.id,
                run_name=name,
                run_type="task",
                spec=spec,
                spec_hash=name,
                status="running",
                submitted_at=self.store.now(),
            )
        )
        job = Job(
            run_id=run.id,
            status="submitted",
            job_spec={"slot": {"nodes": 1}, "spec": spec},
            submitted_at=self.store.now(),
        )
        self.job_ids.append(self.store.add(job).id)
        return self.job_ids[-1]

    def job(self, job_id: str) -> Job:
        row = self.store.get(Job, job_id)
        assert row is not None
        return row

    def instances(self) -> list[Instance]:
        live = ["pending", "provisioning", "idle", "busy", "terminating"]
        return self.store.list_instances(fleet_id=self.fleet_id, statuses=live)

    def ready(self, name: str) -> None:
        """What the instances worker does once the new node's agent answers."""
        (row,) = [i for i in self.instances() if i.name == name]
        self.store.update(Instance, row.id, status="idle", host_info=A100_HOST)

    def finish(self, job_id: str) -> None:
        """The job ended: its instance is idle again from now."""
        job = self.job(job_id)
        self.store.update(Job, job_id, status="done")
        assert job.instance_id is not None
        self.store.update(
            Instance,
            job.instance_id,
            status="idle",
            busy_blocks=0,
            last_job_processed_at=self.store.now(),
        )

    def events(self) -> list[str]:
        return [e.message for e in self.store.list_events(target_type="fleet")]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


async def test_the_fleet_grows_per_waiting_job_up_to_max_and_refuses_what_it_cannot_offer(
    rig: Rig,
) -> None:
    await rig.fleet_pass()  # apply: `nodes.target` is 0, the fleet is a template
    assert rig.store.get(Fleet, rig.fleet_id).status == "active"  # type: ignore[union-attr]
    assert rig.cloud.ups == [0] and rig.instances() == []

    first = rig.submit("one")
    job = await rig.job_pass(first)
    assert job.status == "submitted"
    assert job.status_message == "waiting for fleet gpu to provision a node (0 → 1 of max 2)"
    assert job.runtime == {"awaiting_fleet": rig.fleet_id, "nodes_needed": 1}
    assert "fleets" in rig.hints

    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 1]
    assert [(i.name, i.status, i.backend) for i in rig.instances()] == [("gpu-0", "pending", "aws")]
    assert "fleet gpu: growing 0 → 1 nodes for run one" in rig.events()
    await rig.fleet_pass()  # the node is starting: nothing more to do
    assert rig.cloud.ups == [0, 1]

    rig.ready("gpu-0")
    job = await rig.job_pass(first)
    # placed on gpu-0, and submitted in the same pass (this rig's agents do not answer)
    gpu0 = next(i for i in rig.instances() if i.name == "gpu-0")
    assert (job.status, job.instance_id) == ("provisioning", gpu0.id)
    assert "awaiting_fleet" not in job.runtime

    second = rig.submit("two")  # gpu-0 is busy with `one`: the fleet grows again
    job = await rig.job_pass(second)
    assert job.status_message == "waiting for fleet gpu to provision a node (1 → 2 of max 2)"
    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 1, 2]
    assert [i.name for i in rig.instances()] == ["gpu-0", "gpu-1"]
    rig.ready("gpu-1")
    assert (await rig.job_pass(second)).instance_id == rig.instances()[1].id

    third = rig.submit("three")  # both busy, at max: waits
    job = await rig.job_pass(third)
    assert job.status == "submitted"
    assert "at max 2" in job.status_message
    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 1, 2], "at max: the stack is not touched"

    greedy = rig.submit("greedy", "gpu: A100:4")
    job = await rig.job_pass(greedy)
    assert (job.status, job.termination_reason) == (
        "failed",
        "failed_to_start_due_to_no_capacity",
    )
    assert job.status_message.startswith("no offers: ")
    assert "gpu nvidia:A100:4 not met" in job.status_message

    rig.finish(first)  # `three` takes the freed node; no node is added for it
    job = await rig.job_pass(third)
    assert (job.status, job.instance_id) == ("provisioning", gpu0.id)
    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 1, 2]


async def test_growth_after_a_crash_between_up_and_the_rows_adds_no_second_node(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    await rig.fleet_pass()
    await rig.job_pass(rig.submit("one"))

    def crash(*args: Any) -> int:
        raise RuntimeError("server killed")

    monkeypatch.setattr(fleets, "sync_instances", crash)
    with pytest.raises(RuntimeError):
        await rig.fleet_pass()
    assert rig.cloud.ups == [0, 1] and rig.instances() == []
    monkeypatch.undo()

    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 1, 1], "the retry asks for the same count"
    assert [i.name for i in rig.instances()] == ["gpu-0"]


async def test_idle_nodes_leave_from_the_top_and_the_stack_follows(rig: Rig) -> None:
    await rig.fleet_pass()
    one, two = rig.submit("one"), rig.submit("two")
    await rig.job_pass(one)
    await rig.job_pass(two)
    await rig.fleet_pass()  # both wait: 0 → 2 at once
    assert rig.cloud.ups == [0, 2]
    rig.ready("gpu-0")
    rig.ready("gpu-1")
    await rig.job_pass(one)
    await rig.job_pass(two)
    by_name = {i.name: i for i in rig.instances()}
    assert {rig.job(one).instance_id, rig.job(two).instance_id} == {
        by_name["gpu-0"].id,
        by_name["gpu-1"].id,
    }
    gpu1_job = one if rig.job(one).instance_id == by_name["gpu-1"].id else two
    gpu0_job = two if gpu1_job == one else one

    rig.finish(gpu0_job)  # gpu-0 idle, gpu-1 busy: removing #0 would cut #1 from the stack
    rig.clock.now += 61
    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 2]
    assert [i.status for i in rig.instances()] == ["idle", "busy"]

    rig.finish(gpu1_job)
    rig.clock.now += 30  # gpu-1 idle 30 s (< idle_duration), gpu-0 idle 91 s
    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 2]
    rig.clock.now += 31
    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 2, 0]
    assert rig.instances() == []
    assert any(m.startswith("fleet gpu: shrinking 2 → 0 nodes") for m in rig.events())


async def test_a_shrink_interrupted_before_the_stacks_up_is_finished_next_pass(
    rig: Rig,
) -> None:
    await rig.fleet_pass()
    one = rig.submit("one")
    await rig.job_pass(one)
    await rig.fleet_pass()
    rig.ready("gpu-0")
    await rig.job_pass(one)
    rig.finish(one)
    rig.clock.now += 61
    # The crash: the victim is marked, the stack was not brought down yet.
    (fleet,) = (f for f in rig.store.fleet_records(rig.project.id) if f.id == rig.fleet_id)
    victims = fleets.idle_victims(rig.deps, fleet)
    fleets.terminate_instances(rig.deps, victims, "idle_timeout")
    assert rig.cloud.size["main-fleet-gpu"] == 1

    # The instances worker leaves it to the fleet: the node is still in the stack.
    (victim,) = rig.instances()
    await rig.step(Instance, instances.make_process(rig.deps), victim.id)
    assert rig.store.get(Instance, victim.id).status == "terminating"  # type: ignore[union-attr]

    await rig.fleet_pass()
    assert rig.cloud.size["main-fleet-gpu"] == 0
    assert rig.store.get(Instance, victim.id).status == "terminated"  # type: ignore[union-attr]


async def test_the_plan_warns_only_about_runs_no_fleet_can_grow_for(rig: Rig) -> None:
    await rig.fleet_pass()
    one = rig.submit("one")
    await rig.job_pass(one)
    await rig.fleet_pass()
    rig.ready("gpu-0")
    await rig.job_pass(one)  # an instance is up: warnings are checked

    def action(name: str, resources: str) -> Action:
        text = f"type: task\nname: {name}\ncommands: [x]\nresources:\n  {resources}\n"
        spec = parse_config(text, f"{name}.dstack.yml").normalized()
        path = f"{name}.dstack.yml"
        return Action(ActionKind.CREATE, Kind.TASK, name, "main", path, "new", spec=spec)

    actions = [action("fits", "gpu: A100:1"), action("huge", "gpu: A100:8")]
    warnings = placement_warnings(rig.store, rig.project.id, actions)
    assert len(warnings) == 1
    assert warnings[0].startswith("task 'huge' (huge.dstack.yml): no offers: gpu/gpu-0: gpu")
    assert "fleet gpu: gpu nvidia:A100:8 not met" in warnings[0]


async def test_a_node_taken_by_a_job_while_shrinking_keeps_the_nodes_below_it(rig: Rig) -> None:
    await rig.fleet_pass()
    await rig.job_pass(rig.submit("one"))
    await rig.job_pass(rig.submit("two"))
    await rig.fleet_pass()
    rig.ready("gpu-0")
    rig.ready("gpu-1")
    rig.store.update(Job, rig.job_ids[0], status="terminated")  # nobody waits any more
    rig.store.update(Job, rig.job_ids[1], status="terminated")
    rig.clock.now += 61
    (fleet,) = (f for f in rig.store.fleet_records(rig.project.id) if f.id == rig.fleet_id)
    victims = fleets.idle_victims(rig.deps, fleet)
    assert sorted(v.name for v in victims) == ["gpu-0", "gpu-1"]
    gpu0, gpu1 = rig.instances()
    rig.store.update(Instance, gpu1.id, busy_blocks=1, status="busy")  # a job takes gpu-1 first
    fleets.terminate_instances(rig.deps, victims, "idle_timeout")
    assert [i.status for i in rig.instances()] == ["terminating", "busy"]

    await rig.fleet_pass()  # gpu-0 sits below a node that stays: it stays too
    assert [i.status for i in rig.instances()] == ["idle", "busy"]
    assert rig.cloud.size["main-fleet-gpu"] == 2
    assert rig.store.get(Instance, gpu0.id).termination_reason is None  # type: ignore[union-attr]


async def test_a_job_waits_for_an_ssh_fleet_still_being_set_up_then_fails_once_it_is_not(
    rig: Rig,
) -> None:
    """A run applied right after its SSH fleet: no host exists yet, and the fleet never
    grows; the job waits for the hosts instead of failing `no_capacity` at once."""
    ssh = "type: fleet\nname: lab\nssh_config:\n  user: u\n  hosts: [h]\n"
    spec = parse_config(ssh, "fleets/lab.dstack.yml").normalized()
    lab = rig.store.add(
        Fleet(
            project_id=rig.project.id,
            name="lab",
            spec=spec,
            status="submitted",
            created_at=rig.store.now(),
        )
    )
    rig.store.update(Fleet, rig.fleet_id, status="failed")  # only the SSH fleet could serve
    waiting = rig.submit("early", "cpu: 1..")
    job = await rig.job_pass(waiting)
    assert (job.status, job.status_message) == (
        "submitted",
        "waiting for fleet lab: its hosts are still being set up",
    )
    rig.store.update(Fleet, lab.id, status="failed")  # its hosts never came
    job = await rig.job_pass(waiting)
    assert (job.status, job.termination_reason) == (
        "failed",
        "failed_to_start_due_to_no_capacity",
    )
