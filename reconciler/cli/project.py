"""`dockyard project add|list|set-default`: the servers and projects this CLI talks to.

Kept in `~/.dockyard/config.yml` (`DOCKYARD_CONFIG`), like dstack's `~/.dstack/config.yml`.
`add` checks the URL and token against the server before saving.
"""

from __future__ import annotations

from typing import Annotated

import typer

from reconciler.api import Client
from reconciler.api.config import (
    ProjectConfig,
    add_project,
    config_path,
    load_projects,
    set_default,
)
from reconciler.cli.console import JsonOption, out, print_json, table


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Manage configured projects.", no_args_is_help=True)

    @group.command("add")
    def add(
        name: Annotated[str, typer.Option("--name", help="Project name.")],
        url: Annotated[str, typer.Option("--url", help="Server URL.")],
        token: Annotated[str, typer.Option("--token", help="Your token.")],
        default: Annotated[bool, typer.Option("--default", help="Make it the default.")] = False,
        no_check: Annotated[
            bool, typer.Option("--no-check", help="Do not contact the server.")
        ] = False,
    ) -> None:
        """Add (or replace) a project in the CLI config."""
        if not no_check:
            with Client(url, token, name) as client:
                client.get_project(name)
        add_project(config_path(), ProjectConfig(name, url, token), make_default=default)
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

    app.add_typer(group, name="project")
