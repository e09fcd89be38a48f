"""`dockyard event [list] [-n N] [--since T] [--target-TYPE NAME] [--json]`: state changes.

Every state change is an event row (actor, target, message); the last 100 by default.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from reconciler.api import models as wire
from reconciler.cli.console import JsonOption, ProjectOption, open_client, print_json, table
from reconciler.cli.logs import parse_since


def _show(events: list[wire.Event], as_json: bool) -> None:
    if as_json:
        print_json(events)
        return
    rows = [
        (
            e.timestamp.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
            ", ".join(f"{t.type} {t.name}" for t in e.targets),
            e.message,
        )
        for e in events
    ]
    table(["TIME", "TARGET", "MESSAGE"], rows)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="List events.", invoke_without_command=True)

    def _run(
        limit: int,
        since: str | None,
        target: tuple[str, str] | None,
        as_json: bool,
        project: str | None,
    ) -> None:
        cutoff = parse_since(since, datetime.now(UTC)) if since else None
        with open_client(project) as client:
            events = client.list_events(
                limit=limit,
                since=cutoff,
                target_type=target[0] if target else None,
                target_name=target[1] if target else None,
            )
        _show(events, as_json)

    @group.callback()
    def default(
        ctx: typer.Context,
        limit: Annotated[int, typer.Option("-n", "--last", help="How many.")] = 100,
        since: Annotated[str | None, typer.Option("--since")] = None,
        target_run: Annotated[str | None, typer.Option("--target-run")] = None,
        target_fleet: Annotated[str | None, typer.Option("--target-fleet")] = None,
        target_volume: Annotated[str | None, typer.Option("--target-volume")] = None,
        target_gateway: Annotated[str | None, typer.Option("--target-gateway")] = None,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        if ctx.invoked_subcommand is not None:
            return
        targets = {
            "run": target_run,
            "fleet": target_fleet,
            "volume": target_volume,
            "gateway": target_gateway,
        }
        chosen = next(((k, v) for k, v in targets.items() if v), None)
        _run(limit, since, chosen, json_, project)

    @group.command("list")
    def list_(
        limit: Annotated[int, typer.Option("-n", "--last")] = 100,
        since: Annotated[str | None, typer.Option("--since")] = None,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """List the project's events, oldest first."""
        _run(limit, since, None, json_, project)

    app.add_typer(group, name="event")
