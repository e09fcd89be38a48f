"""`dockyard reconcile [--wait]`, `reconcile list`, `reconcile get ID`: GitOps passes.

`dockyard reconcile` queues a pass of the project now (fetch, plan, apply); `--wait` shows
a spinner with the current stage until it ends and exits non-zero if it failed.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from reconciler.api import Client
from reconciler.api import models as wire
from reconciler.cli.console import (
    JsonOption,
    ProjectOption,
    ago,
    err,
    open_client,
    out,
    print_json,
    table,
)
from reconciler.errors import PermanentError

POLL_SECONDS = 0.5


def wait_reconcile(client: Client, reconcile: wire.Reconcile, timeout: float) -> wire.Reconcile:
    deadline = time.monotonic() + timeout
    console = err()
    with console.status(f"Reconciling ({reconcile.status})") as status:
        while not reconcile.is_finished():
            if time.monotonic() > deadline:
                raise PermanentError(f"reconcile {reconcile.id} still {reconcile.status}")
            time.sleep(POLL_SECONDS)
            reconcile = client.get_reconcile(reconcile.id)
            status.update(f"Reconciling: {reconcile.stage or reconcile.status}")
    return reconcile


def _summary(r: wire.Reconcile) -> str:
    """`reconcile ID succeeded at REV: applied 3, blocked 1: main/fleet/cloud: …`."""
    revision = (r.applied_revision or r.attempted_revision or "")[:12]
    outcome = r.outcome.get("summary") if isinstance(r.outcome, dict) else None
    return (
        f"reconcile {r.id} {r.status}"
        + (f" at {revision}" if revision else "")
        + (f": {r.error}" if r.error else "")
        + (f" ({outcome})" if outcome and r.error else f": {outcome}" if outcome else "")
    )


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Run and inspect GitOps reconciles.", invoke_without_command=True)

    @group.callback()
    def trigger(
        ctx: typer.Context,
        wait: Annotated[bool, typer.Option("--wait", help="Wait until it ends.")] = False,
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait.")] = 1800,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Queue a reconcile of the project now."""
        if ctx.invoked_subcommand is not None:
            return
        with open_client(project) as client:
            reconcile = client.trigger_reconcile()
            if wait:
                reconcile = wait_reconcile(client, reconcile, timeout)
        if json_:
            print_json(reconcile)
        else:
            out().print(_summary(reconcile) if wait else f"Reconcile {reconcile.id} queued.")
        if reconcile.status in ("failed", "aborted"):
            raise typer.Exit(1)

    @group.command("list")
    def list_(
        limit: Annotated[int, typer.Option("-n", "--last")] = 20,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """The latest reconciles."""
        with open_client(project) as client:
            items = client.list_reconciles(limit)
        if json_:
            print_json(items)
            return
        rows = [
            (
                r.id[:8],
                r.trigger,
                r.status,
                r.stage or "",
                (r.attempted_revision or "")[:12],
                ago(r.created_at),
                r.error or "",
            )
            for r in items
        ]
        table(["ID", "TRIGGER", "STATUS", "STAGE", "REVISION", "CREATED", "ERROR"], rows)

    @group.command("get")
    def get(reconcile_id: Annotated[str, typer.Argument()], project: ProjectOption = None) -> None:
        """One reconcile as JSON (plan, outcome, stage timings)."""
        with open_client(project) as client:
            print_json(client.get_reconcile(reconcile_id))

    app.add_typer(group, name="reconcile")
