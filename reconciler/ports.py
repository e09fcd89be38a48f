"""The seam between the HTTP server (`reconciler.web`) and the runtime (`reconciler.engine`).

The web layer never runs workers or reconciles itself: it writes rows through the store
and calls this protocol, which only *hints* work or delegates a single apply. The
composition root (`reconciler.app`) builds the real `Controller` from `reconciler.engine`
and hands it to the web app; tests of the web layer may hand a small fake instead.
"""

from __future__ import annotations

from typing import Literal, Protocol

Trigger = Literal["timer", "webhook", "cli", "api", "startup"]
WorkKind = Literal["runs", "jobs", "instances", "fleets", "volumes", "gateways", "reconciles"]


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
