"""`dockyard delivery list [--json]`: webhook deliveries received (global admins)."""

from __future__ import annotations

from typing import Annotated

import typer

from reconciler.cli.console import JsonOption, ProjectOption, ago, open_client, print_json, table


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Webhook deliveries.", no_args_is_help=True)

    @group.command("list")
    def list_(
        limit: Annotated[int, typer.Option("-n", "--last")] = 50,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """The latest webhook deliveries, with what was done with each."""
        with open_client(project) as client:
            items = client.list_deliveries(limit)
        if json_:
            print_json(items)
            return
        rows = [
            (
                d.provider,
                d.delivery_id,
                d.event,
                d.ref or "",
                d.outcome or "",
                d.reason or "",
                ago(d.received_at),
            )
            for d in items
        ]
        table(["PROVIDER", "DELIVERY", "EVENT", "REF", "OUTCOME", "REASON", "RECEIVED"], rows)

    app.add_typer(group, name="delivery")
