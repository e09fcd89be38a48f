"""The GitOps loop end to end: a real config repo, the whole runtime, the real local agent.

Each test drives `build_controller` (all workers running) against a git repo on disk and
asserts on the store and the logs Dockyard stored. Reconciles are triggered explicitly
(the periodic fetch is set to an hour).
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx

from agent.client import AgentClient
from reconciler.adapters.db.models import Instance
from tests.engine.fixtures import LiveLoop, service_yaml, task_yaml

FINISHED = ("done", "failed", "terminated")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_task_runs_once_per_spec_and_its_logs_are_stored(tmp_path: Path) -> None:
    async with LiveLoop(tmp_path) as loop:
        loop.repo.commit({"train.dstack.yml": task_yaml("train", "echo epoch-one")})
        first = await loop.reconcile()
        assert first.status == "succeeded", first.error
        await loop.until(lambda: [r.status for r in loop.runs("train")] == ["done"])
        assert "epoch-one" in loop.logs(loop.runs("train")[0])

        unchanged = await loop.reconcile()  # the same commit: nothing runs again
        assert unchanged.status == "succeeded"
        assert unchanged.plan["summary"]["noop"] >= 1
        assert len(loop.runs("train")) == 1

        loop.repo.commit({"train.dstack.yml": task_yaml("train", "echo epoch-two")})
        edited = await loop.reconcile()
        assert edited.status == "succeeded", edited.error
        await loop.until(lambda: [r.status for r in loop.runs("train")] == ["done", "done"])
        assert "epoch-two" in loop.logs(loop.runs("train")[1])
        assert "epoch-two" not in loop.logs(loop.runs("train")[0])

        huge = task_yaml("huge").replace("memory: 0.1GB..", "memory: 100000GB..")
        loop.repo.commit({"huge.dstack.yml": huge})
        warned = await loop.reconcile()
        assert warned.status == "succeeded", warned.error
        (warning,) = warned.outcome["warnings"]
        assert warning.startswith("task 'huge' (huge.dstack.yml): no offers:")
        assert "memory 100000GB.. not met" in warning


async def test_an_invalid_commit_applies_nothing(tmp_path: Path) -> None:
    async with LiveLoop(tmp_path) as loop:
        good = loop.repo.commit({"train.dstack.yml": task_yaml("train")})
        assert (await loop.reconcile()).status == "succeeded"
        loop.repo.commit(
            {
                "other.dstack.yml": task_yaml("other"),
                "train.dstack.yml": "type: task\nname: train\ncommands: [echo]\nnodes: zero\n",
            }
        )
        bad = await loop.reconcile()
        assert bad.status == "failed"
        assert "train.dstack.yml:4" in (bad.error or "")
        assert loop.runs("other") == []
        assert loop.store.last_applied_revision(loop.project_id) == good


async def test_a_service_is_healed_after_an_outside_stop_and_stopped_when_removed(
    tmp_path: Path,
) -> None:
    port = _free_port()
    async with LiveLoop(tmp_path) as loop:
        loop.repo.commit({"web.dstack.yml": service_yaml("web", port)})
        assert (await loop.reconcile()).status == "succeeded"
        await loop.until(lambda: [r.status for r in loop.runs("web")] == ["running"])
        await _until_http_ok(loop, port)

        # Stop the job behind Dockyard's back, straight through the agent.
        (job,) = loop.store.list_jobs(loop.runs("web")[0].id)
        instance = loop.store.get(Instance, job.instance_id or "")
        assert instance is not None and job.agent_job_id
        client: AgentClient = loop.controller.agents.client(instance)
        await client.stop(job.agent_job_id, force=True)

        # Dockyard starts it again (a new job, or a new run at the next reconcile).
        def healed() -> bool:
            runs = loop.runs("web")
            jobs = [j for r in runs for j in loop.store.list_jobs(r.id)]
            return len(jobs) >= 2 and runs[-1].status == "running"

        await loop.until(healed)
        await _until_http_ok(loop, port)
        again = await loop.reconcile()
        assert again.status == "succeeded", again.error
        # The job row may trail the process by one poll (pulling while it already serves).
        await loop.until(lambda: [r.status for r in loop.runs("web")][-1] == "running")
        assert len([r for r in loop.runs("web") if r.status == "running"]) == 1

        loop.repo.commit({"web.dstack.yml": None, "keep.dstack.yml": task_yaml("keep")})
        removed = await loop.reconcile()
        assert removed.status == "succeeded", removed.error
        await loop.until(lambda: all(r.status in FINISHED for r in loop.runs("web")))
        assert loop.runs("web")[-1].status == "terminated"


async def test_a_finished_task_is_not_healed(tmp_path: Path) -> None:
    async with LiveLoop(tmp_path) as loop:
        loop.repo.commit({"once.dstack.yml": task_yaml("once", "exit 3")})
        await loop.reconcile()
        await loop.until(lambda: [r.status for r in loop.runs("once")] == ["failed"])
        again = await loop.reconcile()
        assert again.status == "succeeded"
        assert len(loop.runs("once")) == 1


async def _until_http_ok(loop: LiveLoop, port: int) -> None:
    async with httpx.AsyncClient() as http:
        ok: list[bool] = []

        async def probe() -> None:
            try:
                ok.append((await http.get(f"http://127.0.0.1:{port}/", timeout=1)).is_success)
            except httpx.HTTPError:
                ok.append(False)

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # poll with a deadline: the replica may be starting
            await probe()
            if ok[-1]:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the service never answered on {port}:\n{loop.describe()}")
