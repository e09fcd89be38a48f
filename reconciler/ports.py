"""The seam between the HTTP server (`reconciler.web`) and the runtime (`reconciler.engine`).

The web layer never runs workers or reconciles itself: it writes rows through the store
and calls this protocol, which only *hints* work or delegates a single apply. The
composition root (`reconciler.app`) builds the real `Controller` from `reconciler.engine`
and hands it to the web app; tests of the web layer may hand a small fake instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from reconciler.domain.metrics import JobSample

Trigger = Literal["timer", "webhook", "cli", "api", "startup"]
WorkKind = Literal[
    "runs", "jobs", "instances", "fleets", "volumes", "gateways", "reconciles", "teardowns"
]


class Clock(Protocol):
    """Where "now" comes from, so the shell can run in virtual time under test."""

    def now_ts(self) -> float: ...


class Controller(Protocol):
    """What the server asks of the runtime. Every method is idempotent and quick."""

    async def start(self) -> None:
        """Start the workers and the periodic fetch; returns once they run."""

    async def stop(self) -> None:
        """Stop the workers; running jobs keep running on their hosts."""

    def hint(self, kind: WorkKind) -> None:
        """Wake the worker of `kind` now instead of at its next poll."""

    async def request_reconcile(
        self,
        project: str,
        *,
        trigger: Trigger,
        delivery_id: str | None = None,
        revision: str | None = None,
    ) -> str:
        """Queue a reconcile of `project` (coalescing with a queued one); return its id."""

    async def plan_unmanaged(
        self,
        project: str,
        *,
        text: str,
        path: str,
        user: str,
        file_archives: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        """Plan one configuration posted by the CLI (`dockyard apply -f`), with offers.

        `file_archives` (`[{id, path}]`, uploaded by the CLI) are part of a run's spec.
        Returns the plan JSON (the shape documented in docs/plan.md) plus `offers`.
        Raises `schemas.ConfigError` for an invalid configuration.
        """

    async def apply_unmanaged(
        self,
        project: str,
        *,
        text: str,
        path: str,
        user: str,
        force: bool,
        file_archives: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        """Apply one configuration as an unmanaged (`cli:<user>`) resource; return its plan."""

    async def sample_job(
        self, project_id: str, run_name: str, *, job_num: int = 0, replica_num: int = 0
    ) -> JobSample | None:
        """The job's CPU, memory and GPU usage now, asked of its agent; None unless it runs."""

    async def list_gpus(
        self, project_id: str, group_by: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """dstack's `gpus/list` groups: the GPUs of the project's instances."""

    async def stop_run(self, project: str, name: str, *, abort: bool) -> None:
        """Ask the run to stop (graceful, or abort); the workers carry it out."""

    async def delete_resource(self, project: str, kind: str, name: str) -> None:
        """Delete a fleet, volume, gateway or finished run by name."""
