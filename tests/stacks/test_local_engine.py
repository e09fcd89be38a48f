"""The local engine for real on a temporary data dir: fleets, SSH fleets, volumes, gateway."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from stacks.local import LocalEngine, LocalSettings
from stacks.protocol import Engine, StackBusy, StackResource, StepOp
from stacks.running import StackRunner


@pytest.fixture
def settings(tmp_path: Path) -> LocalSettings:
    return LocalSettings(data_dir=tmp_path, user="dock", proxy_url="http://srv:8000/proxy/services")


@pytest.fixture
def engine(settings: LocalSettings) -> LocalEngine:
    return LocalEngine(settings)


def _res(kind: Any, name: str, spec: dict[str, Any]) -> StackResource:
    return StackResource("main", kind, name, f"{name}.dstack.yml", spec)


def test_is_an_engine(engine: LocalEngine) -> None:
    assert isinstance(engine, Engine)
    assert engine.available()


async def test_local_fleet_is_this_host(engine: LocalEngine) -> None:
    res = _res("fleet", "box", {"nodes": {"min": 1, "max": 1}})
    plan = await engine.preview(res)
    assert [(s.op, s.name) for s in plan.steps] == [(StepOp.CREATE, "host/box-0")]
    out = await engine.up(res)
    assert out == {
        "instances": [
            {
                "name": "box-0",
                "hostname": "localhost",
                "port": None,
                "user": "dock",
                "backend": "local",
            }
        ]
    }
    assert (await engine.preview(res)).is_noop


async def test_ssh_fleet_hosts_and_host_changes(engine: LocalEngine) -> None:
    spec: dict[str, Any] = {
        "ssh_config": {
            "user": "ubuntu",
            "identity_file": "~/.ssh/id",
            "hosts": ["10.0.0.1", {"hostname": "10.0.0.2", "port": 2222, "user": "root"}],
        }
    }
    res = _res("fleet", "ssh", spec)
    out = await engine.up(res)
    hosts = [(i["hostname"], i["port"], i["user"], i["backend"]) for i in out["instances"]]
    assert hosts == [("10.0.0.1", 22, "ubuntu", "ssh"), ("10.0.0.2", 2222, "root", "ssh")]
    assert out["instances"][0]["identity_file"] == "~/.ssh/id"

    spec2 = {"ssh_config": {**spec["ssh_config"], "hosts": ["10.0.0.1", "10.0.0.3"]}}
    plan = await engine.preview(_res("fleet", "ssh", spec2))
    ops = {s.name: s.op for s in plan.changes}
    assert ops == {"host/10.0.0.3": StepOp.CREATE, "host/10.0.0.2": StepOp.DELETE}


async def test_volume_directory_lifecycle_and_drift(engine: LocalEngine, tmp_path: Path) -> None:
    res = _res("volume", "data", {"backend": "local", "size": 100})
    out = await engine.up(res)
    path = tmp_path / "volumes" / "main" / "data"
    assert out["path"] == str(path) and path.is_dir()
    assert (await engine.refresh(res)).is_noop

    path.rmdir()  # deleted behind our back
    drift = await engine.refresh(res)
    assert [(s.op, s.name) for s in drift.changes] == [(StepOp.DELETE, "directory/data")]
    await engine.up(res)  # self-heal
    assert path.is_dir()

    (path / "f").write_text("x")
    gone = await engine.preview_destroy(res)  # what a delete removes; changes nothing
    assert [(s.op, s.name, s.type) for s in gone.steps] == [
        (StepOp.DELETE, "directory/data", "local:directory")
    ]
    assert (path / "f").exists()
    await engine.destroy(res)
    assert not path.exists()
    assert (await engine.preview_destroy(res)).steps == ()
    assert [s.op for s in (await engine.preview(res)).steps] == [StepOp.CREATE]
    await engine.destroy(res)  # destroying nothing is a no-op


async def test_gateway_is_the_builtin_proxy(engine: LocalEngine) -> None:
    res = _res("gateway", "gw", {"domain": "example.com"})
    out = await engine.up(res)
    assert out == {
        "domain": "example.com",
        "url": "http://srv:8000/proxy/services/main/",
        "backend": "local",
    }
    plan = await engine.preview(_res("gateway", "gw", {"domain": "other.org"}))
    assert [(s.op, s.diffs) for s in plan.changes] == [(StepOp.UPDATE, ("domain",))]


async def test_busy_stack_raises_stack_busy(settings: LocalSettings) -> None:
    runner = StackRunner(max_parallel=2)
    engine = LocalEngine(settings, runner=runner)
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    res = _res("volume", "v", {"backend": "local"})
    holder = asyncio.ensure_future(runner.run(res.stack_name, hold))
    await asyncio.to_thread(started.wait, 10)
    with pytest.raises(StackBusy, match="main-volume-v is busy"):
        await engine.up(res)
    release.set()
    await holder
    assert (await engine.up(res))["volume_id"].endswith("volumes/main/v")


async def test_cancelled_before_start_releases_the_lock() -> None:
    runner = StackRunner(max_parallel=1)
    gate = threading.Event()
    blocker = asyncio.ensure_future(runner.run("a", lambda: gate.wait(10)))
    queued = asyncio.ensure_future(runner.run("b", lambda: "ran"))
    await asyncio.sleep(0)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    gate.set()
    await blocker
    assert await runner.run("b", lambda: "ran") == "ran"
