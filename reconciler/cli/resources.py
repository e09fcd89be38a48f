"""`dockyard fleet|volume|gateway [list] [get NAME --json] [delete NAME -y]`.

Each group lists by default (`dockyard fleet` = `dockyard fleet list`), as dstack's do.
"""

from __future__ import annotations

from typing import Annotated

import typer

from reconciler.api import Client
from reconciler.cli.console import (
    JsonOption,
    ProjectOption,
    YesOption,
    open_client,
    out,
    print_json,
    table,
)

KINDS = ("fleet", "volume", "gateway")


def _list(client: Client, kind: str, as_json: bool) -> None:
    if kind == "fleet":
        fleets = client.list_fleets()
        if as_json:
            print_json(fleets)
            return
        rows = []
        for fleet in fleets:
            rows.append((fleet.name, "", "", "", fleet.status))
            for i in fleet.instances:
                backend = (i.backend or "-") + (f" ({i.region})" if i.region else "")
                price = f"${i.price:g}" if i.price is not None else "-"
                rows.append(("", str(i.instance_num), backend, price, i.status))
        table(["FLEET", "INSTANCE", "BACKEND", "PRICE", "STATUS"], rows)
        return
    items = client.list_volumes(kind)
    if as_json:
        print_json(items)
        return
    table(
        ["NAME", "BACKEND", "STATUS", "MESSAGE"],
        [(v.name, v.configuration.get("backend", "-"), v.status, v.status_message) for v in items],
    )


def _group(kind: str) -> typer.Typer:
    group = typer.Typer(help=f"Manage {kind}s.", invoke_without_command=True)

    @group.callback()
    def default(
        ctx: typer.Context, json_: JsonOption = False, project: ProjectOption = None
    ) -> None:
        if ctx.invoked_subcommand is None:
            with open_client(project) as client:
                _list(client, kind, json_)

    @group.command("list")
    def list_(json_: JsonOption = False, project: ProjectOption = None) -> None:
        """List them."""
        with open_client(project) as client:
            _list(client, kind, json_)

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
