"""Drift in the plan: a managed service stopped by hand (`dockyard stop`) is, at the next
reconcile, its own action — `create` marked `drift`, "drift: service `web` is terminated
outside Git …, will restore" — not a silent re-create; applying it restores the service.
Likewise a fleet deleted by hand (`dockyard delete fleet`, dstack's `fleet delete`): once
its instances are gone, the next plan (the one plan function, as a PR's) says "drift:
fleet `here` was deleted outside Dockyard … will restore", and applying it brings the
fleet and its instance back.

The whole runtime (`build_controller`) on a git repo, the real local agent.
"""

from __future__ import annotations

import socket
from pathlib import Path

from tests.engine.fixtures import LiveLoop, service_yaml


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_service_stopped_by_hand_is_planned_as_drift_and_restored(
    tmp_path: Path,
) -> None:
    async with LiveLoop(tmp_path) as loop:
        loop.repo.commit({"web.dstack.yml": service_yaml("web", _free_port())})
        first = await loop.reconcile()
        assert first.status == "succeeded", first.error
        web = next(a for a in first.plan["actions"] if a["name"] == "web")
        assert "drift" not in web  # the PR's own change
        await loop.until(lambda: [r.status for r in loop.runs("web")] == ["running"], within=120)

        await loop.controller.stop_run("main", "web", abort=False)  # by hand, outside Git
        await loop.until(lambda: [r.status for r in loop.runs("web")] == ["terminated"])

        again = await loop.reconcile()
        assert again.status == "succeeded", again.error
        web = next(a for a in again.plan["actions"] if a["name"] == "web")
        assert (web["action"], web.get("drift")) == ("create", True)
        assert web["reason"].startswith("drift: service `web` is terminated outside Git")
        assert web["reason"].endswith("will restore: resubmit it")
        await loop.until(lambda: [r.status for r in loop.runs("web")][-1] == "running", within=120)


async def test_a_fleet_deleted_by_hand_is_planned_as_drift_and_restored(tmp_path: Path) -> None:
    async with LiveLoop(tmp_path) as loop:
        loop.repo.commit({"here.dstack.yml": "type: fleet\nname: here\nnodes: 1\n"})
        first = await loop.reconcile()
        assert first.status == "succeeded", first.error

        def instances() -> list[str]:
            rows = loop.store.list_instances(project_id=loop.project_id)
            return [i.status for i in rows if i.status != "terminated"]

        await loop.until(lambda: instances() == ["idle"], within=60)
        await loop.controller.delete_resource("main", "fleet", "here")  # by hand
        await loop.until(lambda: loop.store.get_resource("main", "fleet", "here") is None)
        assert instances() == []

        again = await loop.reconcile()
        assert again.status == "succeeded", again.error
        here_json = next(a for a in again.plan["actions"] if a["name"] == "here")
        assert (here_json["action"], here_json.get("drift")) == ("create", True)
        assert here_json["reason"].startswith("drift: fleet `here` was deleted outside Dockyard")
        await loop.until(lambda: instances() == ["idle"], within=60)
        assert loop.store.get_resource("main", "fleet", "here") is not None
