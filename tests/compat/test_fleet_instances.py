"""dstack 0.22.5's `fleet delete NAME -i N` against `dockyard server`, for a cloud fleet: the
idle top-most instances leave as an idle scale-down makes them (marked terminating for
`idle_timeout`, which the fleets worker finishes by bringing the stack down); an instance
below one that stays, a busy one, or one the minimum `nodes` needs is refused with why.

The server runs without the engine (a fake controller), and the fleet and its instances are
written as the fleets worker records them: no cloud is reached here."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from reconciler.adapters.db.models import Fleet, Instance, Project
from reconciler.core.fleet_instances import LEAVING_REASON
from reconciler.engine.workers.growing import LEAVING_REASON as WORKER_LEAVING_REASON
from tests.compat.conftest import Dstack, short_home
from tests.web.fakes import FakeController
from tests.web.serving import running_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dstack]:
    tmp = tmp_path_factory.mktemp("fleetinst")
    (tmp / "work").mkdir()
    with (
        short_home(tmp / "home") as home,
        running_server(tmp, lambda _settings, store: FakeController(store)) as server,
    ):
        client = Dstack(server, home, tmp / "work")
        url, token = server.url, server.admin_token
        client.ok("project", "add", "--name", "main", "--url", url, "--token", token, "-y")
        yield client


def _cloud_fleet(dstack: Dstack, statuses: list[str]) -> None:
    store = dstack.server.server.store
    with store.writing() as session:
        project = session.scalars(select(Project).where(Project.name == "main")).one()
        now = datetime.now(UTC)
        spec = {
            "type": "fleet",
            "name": "cloud",
            "nodes": {"min": 1, "max": 4},
            "backends": ["aws"],
        }
        fleet = Fleet(
            project_id=project.id, name="cloud", spec=spec, status="active", created_at=now
        )
        session.add(fleet)
        session.flush()
        for num, status in enumerate(statuses):
            session.add(
                Instance(
                    fleet_id=fleet.id,
                    project_id=project.id,
                    name=f"cloud-{num}",
                    status=status,
                    created_at=now,
                    instance_num=num,
                    backend="aws",
                    busy_blocks=1 if status == "busy" else 0,
                )
            )


def _statuses(dstack: Dstack) -> dict[str, tuple[str, str | None]]:
    with dstack.server.server.store.reading() as session:
        rows = session.scalars(select(Instance)).all()
        return {i.name: (i.status, i.termination_reason) for i in rows}


def _said(done: object) -> str:
    return " ".join(getattr(done, "stdout", "").split())


def test_idle_top_instances_leave_others_are_refused_with_why(bare: Dstack, tmp_path: Path) -> None:
    assert LEAVING_REASON == WORKER_LEAVING_REASON
    _cloud_fleet(bare, ["idle", "busy", "idle", "idle"])
    below = bare("fleet", "delete", "cloud", "-i", "2", "-y")
    assert below.returncode == 1
    assert "instance 2 is below instance 3, which stays" in _said(below), below
    busy = bare("fleet", "delete", "cloud", "-i", "1", "-i", "2", "-i", "3", "-y")
    assert busy.returncode == 1 and "instance 1 is busy: stop its runs first" in _said(busy)
    missing = bare("fleet", "delete", "cloud", "-i", "9", "-y")
    assert missing.returncode == 1 and "no instance 9" in _said(missing)
    bare.ok("fleet", "delete", "cloud", "-i", "2", "-i", "3", "-y")
    statuses = _statuses(bare)
    assert statuses["cloud-2"] == statuses["cloud-3"] == ("terminating", LEAVING_REASON)
    assert statuses["cloud-0"] == ("idle", None) and statuses["cloud-1"][0] == "busy"
