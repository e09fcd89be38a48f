"""`dockyard fleet|volume|gateway [list] [get NAME --json] [delete NAME -y]`.

Each group lists by default (`dockyard fleet` = `dockyard fleet list`), as dstack's do,
with dstack's columns: fleets NAME NODES GPU SPOT BACKEND PRICE STATUS CREATED (a row for
what the fleet asks for, then one per instance), volumes NAME BACKEND STATUS CREATED,
gateways NAME BACKEND HOSTNAME DOMAIN DEFAULT STATUS.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from reconciler.api import Client
from reconciler.api import models as wire
from reconciler.cli.console import (
    JsonOption,
    ProjectOption,
    YesOption,
    ago,
    open_client,
    out,
    print_json,
    table,
)
from reconciler.cli.describing import (
    backend_label,
    describe_resources,
    instance_resources,
    nodes_label,
    price_label,
    requested_gpu,
)

KINDS = ("fleet", "volume", "gateway")


def _fleet_rows(fleet: wire.Fleet) -> list[tuple[str, ...]]:
    """dstack's fleet row (what was asked for) and one row per instance (what exists)."""
    config = fleet.spec.get("configuration") or fleet.spec
    ssh = config.get("ssh_config")
    if isinstance(ssh, dict):
        asked = (str(len(ssh.get("hosts") or [])), "", "", "ssh", "")
    else:
        max_price = config.get("max_price")
        asked = (
            nodes_label(config.get("nodes")),
            requested_gpu(config.get("resources")),
            str(config.get("spot_policy") or ""),
            ", ".join(config.get("backends") or []) or "*",
            f"$0..{max_price:g}" if isinstance(max_price, int | float) else "",
        )
    rows: list[tuple[str, ...]] = [(fleet.name, *asked, fleet.status, ago(fleet.created_at))]
    for i in fleet.instances:
        resources = instance_resources(i.instance_type) or i.resources
        remote = i.backend == "remote"
        spot = ""
        if not remote and isinstance(resources, dict):
            spot = "spot" if resources.get("spot") else "on-demand"
        rows.append(
            (
                f"  instance={i.instance_num}",
                "",
                describe_resources(resources, gpu_only=True),
                spot,
                backend_label(i.dockyard_backend, i.backend, i.region),
                "" if remote else price_label(i.price),
                i.status,
                ago(i.created),
            )
        )
    return rows


def _list(client: Client, kind: str, as_json: bool) -> None:
    if kind == "fleet":
        fleets = sorted(client.list_fleets(), key=lambda f: f.created_at, reverse=True)
        if as_json:
            print_json(fleets)
            return
        rows = [row for fleet in fleets for row in _fleet_rows(fleet)]
        table(["NAME", "NODES", "GPU", "SPOT", "BACKEND", "PRICE", "STATUS", "CREATED"], rows)
        return
    items = client.list_volumes(kind)
    if as_json:
        print_json(items)
        return
    if kind == "volume":
        rows = [(v.name, _backend(v.configuration), v.status, ago(v.created_at)) for v in items]
        table(["NAME", "BACKEND", "STATUS", "CREATED"], rows)
        return
    table(
        ["NAME", "BACKEND", "HOSTNAME", "DOMAIN", "DEFAULT", "STATUS"],
        [
            (
                g.name,
                _backend(g.configuration),
                str((g.outputs or {}).get("hostname") or ""),
                str(g.configuration.get("domain") or ""),
                "✓" if g.configuration.get("default") else "",
                g.status,
            )
            for g in items
        ],
    )


def _backend(configuration: dict[str, Any]) -> str:
    backend = str(configuration.get("backend") or "-")
    region = configuration.get("region")
    return f"{backend} ({region})" if region else backend


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
