"""Engine events → plan steps (pure mapping) and the runner's parallelism limit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from pulumi.automation import EngineEvent

from stacks.protocol import StepOp
from stacks.pulumi_engine.events import StepCollector, to_step
from stacks.running import StackRunner

URN = "urn:pulumi:main-fleet-gpu::dockyard::{type}::{name}"


def _event(op: str, type_: str, name: str, **meta: Any) -> EngineEvent:
    metadata = {"op": op, "urn": URN.format(type=type_, name=name), "type": type_, **meta}
    return EngineEvent.from_json({"resourcePreEvent": {"metadata": metadata}})


def test_collector_folds_replacements_and_skips_internal_resources() -> None:
    collect = StepCollector()
    inst = "aws:ec2/instance:Instance"
    for event in (
        _event("same", "pulumi:pulumi:Stack", "dockyard-main-fleet-gpu"),
        _event("create", "pulumi:providers:aws", "default_7_51_1"),
        _event("create-replacement", inst, "gpu-0", diffs=["instanceType"], keys=["instanceType"]),
        _event("replace", inst, "gpu-0", diffs=["instanceType"], keys=["instanceType"]),
        _event("delete-replaced", inst, "gpu-0"),
        _event("update", "aws:ec2/securityGroup:SecurityGroup", "gpu-sg", diffs=["tags"]),
        _event("same", "aws:ec2/keyPair:KeyPair", "gpu-key"),
        _event("read", "aws:ec2/getAmi:getAmi", "ami"),
    ):
        collect(event)
    plan = collect.plan("main-fleet-gpu")
    assert [(s.name, s.op, s.diffs, s.replace_keys) for s in plan.steps] == [
        ("gpu-0", StepOp.REPLACE, ("instanceType",), ("instanceType",)),
        ("gpu-key", StepOp.SAME, (), ()),
        ("gpu-sg", StepOp.UPDATE, ("tags",), ()),
    ]
    assert plan.summary == {"replace": 1, "same": 1, "update": 1}


def test_refresh_ops_read_as_drift() -> None:
    gone = SimpleNamespace(op="refresh", type="gcp:compute/disk:Disk", urn="u::d", new=None,
                           diffs=None, keys=None)  # fmt: skip
    changed = SimpleNamespace(op="refresh", type="gcp:compute/disk:Disk", urn="u::e",
                              new=object(), diffs=["size"], keys=None)  # fmt: skip
    same = SimpleNamespace(op="refresh", type="gcp:compute/disk:Disk", urn="u::f",
                           new=object(), diffs=[], keys=None)  # fmt: skip
    assert [(s.op, s.name) for s in map(to_step, (gone, changed, same)) if s] == [
        (StepOp.DELETE, "d"),
        (StepOp.UPDATE, "e"),
        (StepOp.SAME, "f"),
    ]


async def test_runner_runs_at_most_max_parallel_stacks() -> None:
    runner = StackRunner(max_parallel=2)
    release = threading.Event()
    started: list[str] = []
    both = threading.Barrier(3)

    def work(name: str) -> str:
        started.append(name)
        if len(started) <= 2:
            both.wait(10)
        release.wait(10)
        return name

    def job(name: str) -> Callable[[], str]:
        return lambda: work(name)

    tasks = [asyncio.ensure_future(runner.run(n, job(n))) for n in "abc"]
    await asyncio.to_thread(both.wait, 10)  # a and b are running, holding both workers
    assert sorted(started) == ["a", "b"]
    release.set()
    assert await asyncio.gather(*tasks) == ["a", "b", "c"]
    runner.shutdown()
