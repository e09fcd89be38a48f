"""`dockyard stop NAME [-y] [-x/--abort]`: stop a run gracefully, or abort it."""

from __future__ import annotations

from typing import Annotated

import typer

from reconciler.cli.console import ProjectOption, YesOption, err, open_client, out


def register(app: typer.Typer) -> None:
    @app.command("stop")
    def stop(
        name: Annotated[str, typer.Argument(help="Run name.")],
        abort: Annotated[bool, typer.Option("-x", "--abort", help="Abort: no grace.")] = False,
        yes: YesOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Stop a run (its jobs get SIGTERM, then SIGKILL after stop_duration)."""
        with open_client(project) as client:
            client.get_run(name)  # a clear "not found" before asking
            verb = "Abort" if abort else "Stop"
            if not yes and not typer.confirm(f"{verb} the run {name}?", default=False):
                out().print("Cancelled.")
                return
            warnings = client.stop_runs([name], abort=abort)
            out().print(f"Run {name} {'aborted' if abort else 'stopping'}.")
            for warning in warnings:
                err().print(f"[yellow]warning:[/yellow] {warning}", markup=True)
