"""`dockyard project add|list|set-default|delete`: the servers and projects this CLI talks to.

Kept in `~/.dockyard/config.yml` (`DOCKYARD_CONFIG`), like dstack's `~/.dstack/config.yml`.
`add` checks the URL and token against the server before saving; as dstack's, it asks
whether the new project becomes the default (`-y` yes, `-n` no; without a terminal it does
not ask and keeps the current default). The first project is always the default.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from reconciler.api import Client
from reconciler.api.config import (
    ProjectConfig,
    add_project,
    config_path,
    delete_project,
    load_projects,
    set_default,
)
from reconciler.cli.console import JsonOption, YesOption, out, print_json, table
from reconciler.errors import UsageError


def _make_default(name: str, yes: bool, no: bool) -> bool:
    """dstack's rule: `-y` yes, `-n` no, else ask when another project is the default."""
    if yes or no:
        return yes
    current = next((p for p in load_projects(config_path()) if p.default), None)
    if current is None or current.name == name:
        return True
    if not sys.stdin.isatty():
        return False
    return bool(typer.confirm(f"Set '{name}' as your default project?", default=False))


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Manage configured projects.", no_args_is_help=True)

    @group.command("add")
    def add(
        name: Annotated[str, typer.Option("--name", help="Project name.")],
        url: Annotated[str, typer.Option("--url", help="Server URL.")],
        token: Annotated[str, typer.Option("--token", help="Your token.")],
        yes: Annotated[
            bool, typer.Option("-y", "--yes", "--default", help="Make it the default; no question.")
        ] = False,
        no: Annotated[
            bool, typer.Option("-n", "--no", help="Do not make it the default; no question.")
        ] = False,
        no_check: Annotated[
            bool, typer.Option("--no-check", help="Do not contact the server.")
        ] = False,
    ) -> None:
        """Add (or replace) a project in the CLI config."""
        if yes and no:
            raise UsageError("-y and -n cannot be used together")
        if not no_check:
            with Client(url, token, name) as client:
                client.get_project(name)
        make_default = _make_default(name, yes, no)
        add_project(config_path(), ProjectConfig(name, url, token), make_default=make_default)
        out().print(f"Project {name} added to {config_path()}.")

    @group.command("list")
    def list_(json_: JsonOption = False) -> None:
        """Configured projects (tokens are not shown)."""
        projects = load_projects(config_path())
        if json_:
            print_json([{"name": p.name, "url": p.url, "default": p.default} for p in projects])
            return
        table(
            ["PROJECT", "URL", "DEFAULT"],
            [(p.name, p.url, "✓" if p.default else "") for p in projects],
        )

    @group.command("set-default")
    def set_default_(name: Annotated[str, typer.Argument()]) -> None:
        """Make a configured project the default."""
        set_default(config_path(), name)
        out().print(f"Default project: {name}.")

    @group.command("delete")
    def delete(name: Annotated[str, typer.Argument()], yes: YesOption = False) -> None:
        """Remove a project from the CLI config (the project stays on its server)."""
        if not yes and not typer.confirm(f"Remove the project {name} from the config?"):
            out().print("Cancelled.")
            return
        delete_project(config_path(), name)
        out().print(f"Project {name} removed from {config_path()}.")

    app.add_typer(group, name="project")
