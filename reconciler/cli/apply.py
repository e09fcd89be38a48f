"""`dockyard apply -f FILE [-y] [-d] [--force]`: plan, ask, apply one configuration.

As dstack's `apply`: shows the plan with the offers table and prices, asks ("Submit the run
X?"), `-y` skips the question, `-f -` reads stdin (and then needs `-y`). "Detected no
changes" with `-y` and no `--force` exits 0 without applying. For a run, attached mode
(the default) waits with a spinner while it is provisioned and pulled, then streams its
logs and forwards its ports until the run ends or Ctrl-C, which detaches without stopping
the run; `-d` returns right after submitting.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.api import Client
from reconciler.cli.console import ProjectOption, YesOption, err, open_client, out
from reconciler.cli.planview import action_of, is_noop, question, show_plan
from reconciler.cli.waiting import follow_run, wait_fleet
from reconciler.errors import UsageError
from schemas import ConfigError

RUN_KINDS = ("task", "service", "dev-environment")


def read_config(path: str) -> tuple[str, str]:
    """(text, path as sent to the server); `-` reads stdin."""
    if path == "-":
        return sys.stdin.read(), "stdin.dstack.yml"
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: no such configuration file")
    return file.read_text(), path


def print_problems(exc: ConfigError) -> None:
    for problem in exc.problems:
        err().print(f"[red]error:[/red] {problem.format()}")


def _apply(
    client: Client, text: str, path: str, *, yes: bool, force: bool
) -> dict[str, object] | None:
    plan = client.get_plan(text, path)
    show_plan({**plan, "path": path}, client.project, client.me().username)
    if is_noop(plan) and not force:
        out().print("Detected no changes.")
        return None
    if not yes and not typer.confirm(question(plan), default=False):
        out().print("Cancelled.")
        return None
    return client.apply(text, path, force=force)


def register(app: typer.Typer) -> None:
    @app.command("apply")
    def apply(
        file: Annotated[
            str, typer.Option("-f", "--file", help="Configuration file; '-' reads stdin.")
        ] = ".dstack.yml",
        yes: YesOption = False,
        detach: Annotated[
            bool, typer.Option("-d", "--detach", help="Return once submitted.")
        ] = False,
        force: Annotated[bool, typer.Option("--force", help="Apply even if unchanged.")] = False,
        project: ProjectOption = None,
    ) -> None:
        """Apply a configuration: show the plan and offers, confirm, create or update it."""
        if file == "-" and not yes:
            raise UsageError("reading the configuration from stdin needs -y")
        text, path = read_config(file)
        with open_client(project) as client:
            try:
                applied = _apply(client, text, path, yes=yes, force=force)
            except ConfigError as exc:
                print_problems(exc)
                raise typer.Exit(1) from None
            if applied is None:
                return
            _, kind, name = action_of(applied)
            if kind == "fleet" and not detach:
                wait_fleet(client, name)
            if kind not in RUN_KINDS:
                out().print(f"{kind.capitalize()} {name} applied.")
                return
            out().print(f"Run {name} submitted.")
            if detach:
                return
            follow_run(client, name)
