"""`dockyard fleet|volume|gateway [list] [get NAME --json] [delete NAME -y]`.

Each group lists by default (`dockyard fleet` = `dockyard fleet list`), as dstack's do,
with dstack's columns (`resource_tables`), `-v` for more of them and `-w` to refresh every
2 s until Ctrl-C.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from reconciler.api import Client
from reconciler.cli.console import (
    JsonOption,
    ProjectOption,
    YesOption,
    open_client,
    out,
    print_json,
)
from reconciler.cli.console import grid as console_grid
from reconciler.cli.resource_tables import Rows, fleet_table, gateway_table, volume_table

KINDS = ("fleet", "volume", "gateway")


WATCH_SECONDS = 2.0
VerboseOption = Annotated[bool, typer.Option("-v", "--verbose", help="More columns.")]
WatchOption = Annotated[bool, typer.Option("-w", "--watch", help="Refresh until Ctrl-C.")]


def _rows(client: Client, kind: str, verbose: bool) -> tuple[list[str], Rows]:
    if kind == "fleet":
        return fleet_table(client.list_fleets(), verbose)
    items = client.list_volumes(kind)
    return volume_table(items, verbose) if kind == "volume" else gateway_table(items, verbose)


def _grid(columns: list[str], rows: Rows) -> Table:
    return console_grid(columns, rows)


def _list(client: Client, kind: str, as_json: bool, verbose: bool, watch: bool) -> None:
    if as_json:
        print_json(client.list_fleets() if kind == "fleet" else client.list_volumes(kind))
        return

    def grid() -> Table:
        return _grid(*_rows(client, kind, verbose))

    if not watch:
        out().print(grid())
        return
    from rich.live import Live

    console = out()
    try:
        while not console.is_terminal:  # piped: a fresh table every interval
            console.print(grid())
            console.file.flush()
            time.sleep(WATCH_SECONDS)
        with Live(grid(), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(WATCH_SECONDS)
                live.update(grid(), refresh=True)
    except KeyboardInterrupt:
        return


def _group(kind: str) -> typer.Typer:
    group = typer.Typer(help=f"Manage {kind}s.", invoke_without_command=True)

    @group.callback()
    def default(
        ctx: typer.Context,
        watch: WatchOption = False,
        verbose: VerboseOption = False,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        if ctx.invoked_subcommand is None:
            with open_client(project) as client:
                _list(client, kind, json_, verbose, watch)

    @group.command("list")
    def list_(
        watch: WatchOption = False,
        verbose: VerboseOption = False,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """List them."""
        with open_client(project) as client:
            _list(client, kind, json_, verbose, watch)

    @group.command("get")
    def get(
        name: Annotated[str, typer.Argument()],
        json_: JsonOption = True,
        project: ProjectOption = None,
    ) -> None:
        """Print one as JSON."""
        with open_client(project) as client:
            print_json(client.get_fleet(name) if kind == "fleet" else client.get_volume(name, kind))

    @group.command("delete")
    def delete(
        name: Annotated[str, typer.Argument()],
        yes: YesOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Delete it (its stack is destroyed)."""
        with open_client(project) as client:
            if not yes and not typer.confirm(f"Delete the {kind} {name}?", default=False):
                out().print("Cancelled.")
                return
            client.delete(kind, [name])
            out().print(f"{kind.capitalize()} {name} deleted.")

    return group


def register(app: typer.Typer) -> None:
    for kind in KINDS:
        app.add_typer(_group(kind), name=kind, help=f"List, inspect and delete {kind}s.")
