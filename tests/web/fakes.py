"""A stand-in `Controller` for tests of the layer above it: the API, the CLI and the
console (the real one is `reconciler.engine`; tests of what the engine decides or does use
tests/web/realserver.py).

It runs no workers and no agent, so it never reports an outcome of its own. What it does
is the real controller's synchronous part over the same real store: a reconcile is queued
as a row and stays `queued`; a posted config is planned and applied by the real
`reconciler.engine.unmanaged` (default rules, limits and catalog), so a run stays
`submitted` and a fleet gets no instance until a worker (absent here) provisions one; stop
and delete are the real store's; `list_gpus` groups what the store holds; `sample_job`
answers None (no job runs). It records every call (`reconciles`, `hints`) for the tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.adapters.db import Store
from reconciler.core.gpugroups import gpu_groups
from reconciler.core.rendering_json import action_to_dict
from reconciler.domain.metrics import JobSample
from reconciler.engine import unmanaged
from reconciler.ports import Trigger, WorkKind


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

    async def request_reconcile(
        self,
        project: str,
        *,
        trigger: Trigger,
        delivery_id: str | None = None,
        revision: str | None = None,
    ) -> str:
        self.reconciles.append((project, trigger, delivery_id, revision))
        project_id = self.store.project_id_of(project)
        assert project_id is not None, project
        row = self.store.create_reconcile(
            project_id,
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
        action = unmanaged.plan_one(
            self.store, project, text=text, path=path, user=user, file_archives=file_archives
        )
        offers = unmanaged.offers_for(self.store, project, action)
        return {**action_to_dict(action), "offers": offers}

    async def apply_unmanaged(
        self,
        project: str,
        *,
        text: str,
        path: str,
        user: str,
        force: bool,
        file_archives: Sequence[Mapping[str, str]] = (),
        **_: Any,
    ) -> dict[str, Any]:
        plan, hints = await asyncio.to_thread(
            unmanaged.apply_one,
            self.store,
            project,
            text=text,
            path=path,
            user=user,
            force=force,
            file_archives=file_archives,
        )
        for kind in sorted(hints):
            self.hint(kind)
        return plan

    async def sample_job(
        self, project_id: str, run_name: str, *, job_num: int = 0, replica_num: int = 0
    ) -> JobSample | None:
        return None  # it runs nothing: no job to sample

    async def list_gpus(
        self, project_id: str, group_by: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        candidates = await asyncio.to_thread(self.store.placement_candidates, project_id)
        return gpu_groups(candidates, group_by)

    async def stop_run(self, project: str, name: str, *, abort: bool) -> None:
        if await asyncio.to_thread(unmanaged.stop_run, self.store, project, name, abort=abort):
            self.hint("runs")

    async def delete_resource(self, project: str, kind: str, name: str) -> None:
        self.hint(
            await asyncio.to_thread(unmanaged.delete_resource, self.store, project, kind, name)
        )
