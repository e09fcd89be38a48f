"""A minimal local `Controller` for tests of the layer above it (the real one is
`reconciler.engine`; tests of what the engine decides use tests/web/realserver.py).

It does what the server needs to observe: queues reconciles as rows, records unmanaged
runs and fleets as rows (status `submitted`), and marks stops and deletes. It runs nothing,
so it reports no outcome: a reconcile it queues stays `queued` (it never says a commit
succeeded, which the real controller might fail).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Fleet, Instance, Job, Project, Resource, Run
from reconciler.core.rendering_json import action_to_dict
from reconciler.domain.metrics import JobSample
from reconciler.engine import unmanaged
from reconciler.ports import Trigger, WorkKind
from schemas import parse_config


class FakeController:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.started = False
        self.stopped = False
        self.hints: list[WorkKind] = []
        self.reconciles: list[tuple[str, str, str | None, str | None]] = []

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def hint(self, kind: WorkKind) -> None:
        self.hints.append(kind)

    def _project_id(self, project: str) -> str:
        with self.store.reading() as session:
            project_id = session.scalar(select(Project.id).where(Project.name == project))
        assert project_id is not None
        return project_id

    async def request_reconcile(
        self,
        project: str,
        *,
        trigger: Trigger,
        delivery_id: str | None = None,
        revision: str | None = None,
    ) -> str:
        self.reconciles.append((project, trigger, delivery_id, revision))
        row = self.store.create_reconcile(
            self._project_id(project),
            trigger=trigger if trigger != "startup" else "timer",
            delivery_id=delivery_id,
            attempted_revision=revision,
        )
        return row.id

    async def plan_unmanaged(
        self,
        project: str,
        *,
        text: str,
        path: str,
        user: str,
        file_archives: Sequence[Mapping[str, str]] = (),
        **_: Any,
    ) -> dict[str, Any]:
        """The real controller's planning (`reconciler.engine.unmanaged`), without its
        runtime's policy rules, limits and catalog (the defaults)."""
        action = unmanaged.plan_one(
            self.store, project, text=text, path=path, user=user, file_archives=file_archives
        )
        offers = unmanaged.offers_for(self.store, project, action)
        return {**action_to_dict(action), "offers": offers}

    async def apply_unmanaged(
        self, project: str, *, text: str, path: str, user: str, force: bool, **_: Any
    ) -> dict[str, Any]:
        config = parse_config(text, path)
        plan = await self.plan_unmanaged(project, text=text, path=path, user=user)
        now = datetime.now(UTC)
        spec = config.normalized()
        digest = hashlib.sha256(text.encode()).hexdigest()
        with self.store.writing() as session:
            project_id = session.scalar(select(Project.id).where(Project.name == project))
            assert project_id is not None and config.name is not None
            resource = Resource(
                project_id=project_id,
                kind=config.type,
                name=config.name,
                origin=f"cli:{user}",
                path=path,
                commit=None,
                spec=spec,
                spec_hash=digest,
                status="submitted",
                created_at=now,
                updated_at=now,
            )
            session.add(resource)
            session.flush()
            if config.type == "fleet":
                fleet = Fleet(
                    project_id=project_id,
                    name=config.name,
                    spec=spec,
                    status="active",
                    created_at=now,
                    resource_id=resource.id,
                )
                session.add(fleet)
                session.flush()
                session.add(
                    Instance(
                        fleet_id=fleet.id,
                        project_id=project_id,
                        name=f"{config.name}-0",
                        status="idle",
                        created_at=now,
                        backend="local",
                        hostname="127.0.0.1",
                    )
                )
            else:
                run = Run(
                    project_id=project_id,
                    run_name=config.name,
                    run_type=config.type,
                    spec=spec,
                    spec_hash=digest,
                    status="submitted",
                    submitted_at=now,
                    resource_id=resource.id,
                )
                session.add(run)
                session.flush()
                session.add(Job(run_id=run.id, status="submitted", job_spec={}, submitted_at=now))
        return plan

    async def sample_job(
        self, project_id: str, run_name: str, *, job_num: int = 0, replica_num: int = 0
    ) -> JobSample | None:
        return None  # it runs nothing: no job to sample

    async def list_gpus(
        self, project_id: str, group_by: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        return []

    async def stop_run(self, project: str, name: str, *, abort: bool) -> None:
        with self.store.writing() as session:
            for run in session.scalars(select(Run).where(Run.run_name == name)):
                run.status = "terminated"
                run.termination_reason = "aborted_by_user" if abort else "stopped_by_user"

    async def delete_resource(self, project: str, kind: str, name: str) -> None:
        model: Any = Run if kind == "run" else Fleet
        column = model.run_name if kind == "run" else model.name
        with self.store.writing() as session:
            for row in session.scalars(select(model).where(column == name)):
                row.deleted = True
