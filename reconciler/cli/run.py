"""`dockyard run get NAME --json`: one run as dstack's Run JSON (indent 2, nulls kept)."""

from __future__ import annotations

from typing import Annotated

import typer

from reconciler.cli.console import JsonOption, ProjectOption, open_client, print_json


def register(app: typer.Typer) -> None:
    run_app = typer.Typer(help="Inspect runs.", no_args_is_help=True)

    @run_app.command("get")
    def get(
        name: Annotated[str, typer.Argument(help="Run name.")],
        json_: JsonOption = True,
        project: ProjectOption = None,
    ) -> None:
        """Print the run as JSON (dstack's Run shape: status, jobs, service.url, …)."""
        with open_client(project) as client:
            print_json(client.get_run(name))

    app.add_typer(run_app, name="run")
