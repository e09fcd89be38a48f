"""`dockyard secret set NAME VALUE | list | get NAME | delete NAME [-y]`: project secrets.

Referenced from configurations as `${{ secrets.NAME }}`. Values are encrypted at rest.
The tables are dstack's (NAME VALUE): `list` masks every value, `get` shows the value to
project admins only; `get --json` prints `{"name", "value"}` for scripts.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from reconciler.cli.console import (
    JsonOption,
    ProjectOption,
    YesOption,
    open_client,
    out,
    print_json,
    table,
)

MASK = "*" * 6


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Manage project secrets.", no_args_is_help=True)

    @group.command("set")
    def set_(
        name: Annotated[str, typer.Argument()],
        value: Annotated[str, typer.Argument(help="The value ('-' reads stdin).")],
        project: ProjectOption = None,
    ) -> None:
        """Create or update a secret."""
        if value == "-":
            value = sys.stdin.read().rstrip("\n")
        with open_client(project) as client:
            client.set_secret(name, value)
        out().print(f"Secret {name} set.")

    @group.command("list")
    def list_(json_: JsonOption = False, project: ProjectOption = None) -> None:
        """Secret names."""
        with open_client(project) as client:
            items = client.list_secrets()
        if json_:
            print_json(items)
        else:
            table(["NAME", "VALUE"], [(s.name, MASK) for s in items])

    @group.command("get")
    def get(
        name: Annotated[str, typer.Argument()],
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Print a secret's value (project admins only)."""
        with open_client(project) as client:
            secret = client.get_secret(name)
        if json_:
            print_json({"name": secret.name, "value": secret.value})
            return
        table(["NAME", "VALUE"], [(secret.name, secret.value or MASK)])

    @group.command("delete")
    def delete(
        name: Annotated[str, typer.Argument()],
        yes: YesOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Delete a secret."""
        if not yes and not typer.confirm(f"Delete the secret {name}?", default=False):
            out().print("Cancelled.")
            return
        with open_client(project) as client:
            client.delete_secret(name)
        out().print(f"Secret {name} deleted.")

    app.add_typer(group, name="secret")
