"""The Pulumi engine driven through the PulumiCommand seam with the fake CLI.

The fake runs the real inline programs over the SDK's gRPC protocol:
these tests cover the driver contract (stack per resource, config, events → steps,
outputs, errors, locks, cancellation), not Pulumi's semantics.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stacks.protocol import StackBusy, StackFailed, StackProgramError, StepOp
from stacks.pulumi_engine.engine import PulumiEngine
from tests.stacks.conftest import PASSPHRASE
from tests.stacks.programs import fleet

SPEC: dict[str, Any] = {
    "backends": ["aws"],
    "resources": {"gpu": "A10G:1", "disk": "200GB.."},
    "nodes": 2,
    "spot_policy": "on-demand",
}
INSTANCE = "aws:ec2/instance:Instance"


def _ops(plan: Any) -> dict[str, tuple[StepOp, tuple[str, ...]]]:
    return {s.name: (s.op, s.diffs) for s in plan.steps}


async def test_preview_up_and_outputs(pulumi_engine: PulumiEngine, tmp_path: Path) -> None:
    assert pulumi_engine.available()
    res = fleet("train", SPEC)
    plan = await pulumi_engine.preview(res)
    assert {s.name: s.op for s in plan.steps} == {
        "train-key": StepOp.CREATE,
        "train-sg": StepOp.CREATE,
        "train-0": StepOp.CREATE,
        "train-1": StepOp.CREATE,
    }
    assert plan.summary == {"create": 4}
    assert plan.stack == "main-fleet-train"

    out = await pulumi_engine.up(res)
    hosts = [(i["name"], i["hostname"], i["instance_type"]) for i in out["instances"]]
    assert hosts == [
        ("train-0", "198.51.100.7", "g5.xlarge"),
        ("train-1", "198.51.100.7", "g5.xlarge"),
    ]
    assert out["instances"][0]["instance_id"].startswith("train-0-")
    state_dir = tmp_path / "data" / "pulumi" / "state"
    assert (state_dir / ".fake" / "dockyard" / "main-fleet-train.json").exists()
    work_dir = tmp_path / "data" / "pulumi" / "workspaces" / "main-fleet-train"
    assert "file://" in (work_dir / "Pulumi.yaml").read_text()
    assert (await pulumi_engine.preview(res)).is_noop
    # the passphrase reached the CLI (the fake refuses `stack init` without it) only
    # through the workspace's env_vars, never through this process's environment
    assert "PULUMI_CONFIG_PASSPHRASE" not in os.environ


async def test_changes_map_to_update_replace_and_growth(pulumi_engine: PulumiEngine) -> None:
    await pulumi_engine.up(fleet("train", SPEC))
    bigger_disk = {**SPEC, "resources": {"gpu": "A10G:1", "disk": "400GB.."}}
    plan = await pulumi_engine.preview(fleet("train", bigger_disk))
    assert _ops(plan)["train-0"] == (StepOp.UPDATE, ("rootBlockDevice",))
    assert len(plan.changes) == 2

    other_type = {**SPEC, "resources": {"gpu": "L4:1", "disk": "200GB.."}}
    plan = await pulumi_engine.preview(fleet("train", other_type))
    step = next(s for s in plan.steps if s.name == "train-1")
    assert (step.op, step.replace_keys) == (StepOp.REPLACE, ("instanceType",))

    grown = replace(fleet("train", SPEC), nodes=3)
    plan = await pulumi_engine.preview(grown)
    assert [(s.name, s.op) for s in plan.changes] == [("train-2", StepOp.CREATE)]
    shrunk = replace(fleet("train", SPEC), nodes=1)
    plan = await pulumi_engine.preview(shrunk)
    assert [(s.name, s.op) for s in plan.changes] == [("train-1", StepOp.DELETE)]
    assert len((await pulumi_engine.up(shrunk))["instances"]) == 1


async def test_refresh_detects_drift(
    pulumi_engine: PulumiEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = fleet("train", SPEC)
    await pulumi_engine.up(res)
    assert (await pulumi_engine.refresh(res)).is_noop
    monkeypatch.setenv("FAKE_PULUMI_DRIFT", json.dumps({"train-0": None, "train-1": {"x": 1}}))
    drift = await pulumi_engine.refresh(res)
    assert _ops(drift)["train-0"] == (StepOp.DELETE, ())
    assert _ops(drift)["train-1"] == (StepOp.UPDATE, ("x",))
    assert drift.summary == {"delete": 1, "update": 1, "same": 2}


async def test_destroy_removes_the_stack(pulumi_engine: PulumiEngine, tmp_path: Path) -> None:
    res = fleet("train", SPEC)
    await pulumi_engine.up(res)
    await pulumi_engine.destroy(res)
    state = tmp_path / "data" / "pulumi" / "state" / ".fake" / "dockyard"
    assert not (state / "main-fleet-train.json").exists()
    assert not (tmp_path / "data" / "pulumi" / "workspaces" / "main-fleet-train").exists()
    await pulumi_engine.destroy(res)  # nothing left: a no-op
    assert all(s.op is StepOp.CREATE for s in (await pulumi_engine.preview(res)).steps)


async def test_destroy_preview_lists_what_the_stack_holds_and_changes_nothing(
    pulumi_engine: PulumiEngine, tmp_path: Path
) -> None:
    res = fleet("train", SPEC)
    assert (await pulumi_engine.preview_destroy(res)).steps == ()  # never created: nothing
    await pulumi_engine.up(res)
    plan = await pulumi_engine.preview_destroy(res)
    assert {s.op for s in plan.steps} == {StepOp.DELETE}
    assert {"train-0", "train-1"} <= {s.name for s in plan.steps if s.type == INSTANCE}
    assert plan.summary == {"delete": len(plan.steps)}
    state = tmp_path / "data" / "pulumi" / "state" / ".fake" / "dockyard"
    held = json.loads((state / "main-fleet-train.json").read_text())["resources"]
    assert len(held) == len(plan.steps)  # the preview deleted nothing
    assert all(s.op is StepOp.SAME for s in (await pulumi_engine.preview(res)).steps)


async def test_lock_held_elsewhere_is_busy_then_retried(
    pulumi_engine: PulumiEngine, tmp_path: Path
) -> None:
    res = fleet("train", SPEC)
    await pulumi_engine.preview(res)  # creates the stack
    locks = tmp_path / "data/pulumi/state/.pulumi/locks/organization/dockyard/main-fleet-train"
    locks.mkdir(parents=True)
    (locks / "other.json").write_text("{}")
    with pytest.raises(StackBusy, match="main-fleet-train is locked"):
        await pulumi_engine.up(res)
    (locks / "other.json").unlink()
    assert len((await pulumi_engine.up(res))["instances"]) == 2


async def test_program_error_names_file_and_resource(pulumi_engine: PulumiEngine) -> None:
    with pytest.raises(StackProgramError) as info:
        await pulumi_engine.preview(
            fleet("none", {"backends": ["aws"], "resources": {"gpu": "X9"}})
        )
    assert (info.value.path, info.value.name) == ("fleets/none.dstack.yml", "none")


async def test_failing_program_reported_with_file_and_name(
    tmp_path: Path, fake_pulumi_root: Path
) -> None:
    from stacks.programs.registry import Program
    from stacks.pulumi_engine.settings import PulumiSettings
    from tests.stacks.programs import SETTINGS

    def broken(*_: Any, **__: Any) -> Program:
        def run() -> None:
            raise RuntimeError("quota exceeded for p5.48xlarge")

        return Program(run, {"aws:region": "us-east-1"}, "aws")

    settings = PulumiSettings(
        data_dir=tmp_path / "d",
        programs=SETTINGS,
        passphrase=PASSPHRASE,
        pulumi_root=fake_pulumi_root,
    )
    engine = PulumiEngine.create(settings, build=broken)
    try:
        with pytest.raises(StackProgramError) as info:
            await engine.up(fleet("train", SPEC))
    finally:
        engine.shutdown()
    assert info.value.path == "fleets/train.dstack.yml" and info.value.name == "train"
    assert "quota exceeded for p5.48xlarge" in str(info.value)
    assert PASSPHRASE not in str(info.value)


async def test_four_stacks_in_parallel(pulumi_engine: PulumiEngine) -> None:
    names = ["a1", "a2", "a3", "a4"]
    outs = await asyncio.gather(*(pulumi_engine.up(fleet(n, SPEC)) for n in names))
    assert [o["instances"][0]["name"] for o in outs] == [f"{n}-0" for n in names]


async def test_cancel_interrupts_the_cli_and_clears_the_lock(
    pulumi_engine: PulumiEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = fleet("train", SPEC)
    await pulumi_engine.preview(res)
    fifo = tmp_path / "started.fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv("FAKE_PULUMI_HANG_FIFO", str(fifo))
    task = asyncio.ensure_future(pulumi_engine.up(res))
    started = await asyncio.to_thread(fifo.read_text)
    assert started == "started\n"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await pulumi_engine.wait_idle(res)
    monkeypatch.delenv("FAKE_PULUMI_HANG_FIFO")
    assert len((await pulumi_engine.up(res))["instances"]) == 2


async def test_fleet_without_chosen_offers_takes_the_cheapest(pulumi_engine: PulumiEngine) -> None:
    res = replace(fleet("cheap", SPEC), offers=())
    out = await pulumi_engine.up(res)
    assert out["instances"][0]["instance_type"] == "g5.xlarge"
    assert out["instances"][0]["price"] == 1.006


async def test_cli_failure_is_stack_failed_without_the_passphrase(
    pulumi_engine: PulumiEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PULUMI_FAIL", "up")
    with pytest.raises(StackFailed) as info:
        await pulumi_engine.up(fleet("train", SPEC))
    message = str(info.value)
    assert message.startswith("fleet 'train' (fleets/train.dstack.yml): pulumi up failed:")
    assert "the cloud refused" in message
    assert PASSPHRASE not in message and "***" in message
