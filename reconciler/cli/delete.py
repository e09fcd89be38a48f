"""`dockyard delete [-f FILE] [-y] [--project P]`: delete what a configuration file describes.

As dstack's `delete`: the file (default `.dstack.yml`) names a run, fleet, volume or
gateway; after a confirmation (`-y` skips it) that resource is deleted in the project —
a run's record (the server refuses one that is still active: stop it first), a fleet,
volume or gateway with its stack. Resources Git manages are the server's to refuse.
"""

from __future__ import annotations

from typing import Annotated

import typer

from reconciler.cli.apply import print_problems, read_config
from reconciler.cli.console import ProjectOption, YesOption, open_client, out
from reconciler.errors import UsageError
from schemas import ConfigError, parse_config

CAPACITY_KINDS = ("fleet", "volume", "gateway")
RUN_KINDS = ("task", "service", "dev-environment")


def register(app: typer.Typer) -> None:
    @app.command("delete")
    def delete(
        file: Annotated[
            str, typer.Option("-f", "--file", help="The configuration file (default .dstack.yml).")
        ] = ".dstack.yml",
        yes: YesOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Delete what a configuration file describes (a run, fleet, volume or gateway)."""
        text, path = read_config(file)
        try:
            config = parse_config(text, path)
        except ConfigError as exc:
            print_problems(exc)
            raise typer.Exit(1) from None
        kind, name = str(config.type), config.name
        if kind not in (*RUN_KINDS, *CAPACITY_KINDS):
            raise UsageError(f"{path}: a {kind} configuration describes nothing to delete")
        if not name:
            raise UsageError(f"{path}: the configuration has no `name`, so nothing to delete")
        what = "run" if kind in RUN_KINDS else kind
        with open_client(project) as client:
            if what == "run":
                client.get_run(name)  # NotFoundError: one line, exit 1
            if not yes and not typer.confirm(f"Delete the {what} {name}?", default=False):
                out().print("Cancelled.")
                return
            if what == "run":
                client.delete_runs([name])
            else:
                client.delete(what, [name])
        out().print(f"{what.capitalize()} {name} deleted.")
