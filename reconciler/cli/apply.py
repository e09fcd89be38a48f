"""`dockyard apply -f FILE [-y] [-d] [--force]`: plan, ask, apply one configuration.

As dstack's `apply`: shows the plan with the offers table and prices, asks ("Submit the run
X?"), `-y` skips the question, `-f -` reads stdin (and then needs `-y`). "Detected no
changes" with `-y` and no `--force` exits 0 without applying. A run's local `repos` and
`files` are packed and uploaded first (`uploading`), so the job finds them in its working
dir, and changed code is a change of the run. For a run, attached mode
(the default) waits with a spinner while it is provisioned and pulled, then streams its
logs and forwards its ports until the run ends or Ctrl-C, which detaches without stopping
the run; `-d` returns right after submitting. The configuration's warnings
(`schemas.caveats`: a legacy relative `working_dir`, …) are printed on stderr first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.api import Client
from reconciler.cli.console import ProjectOption, YesOption, err, open_client, out
from reconciler.cli.planview import action_of, is_noop, question, show_plan
from reconciler.cli.uploading import upload_local
from reconciler.cli.waiting import follow_run, wait_fleet
from reconciler.errors import UsageError
from schemas import ConfigError, parse_config
from schemas.caveats import config_warnings

RUN_KINDS = ("task", "service", "dev-environment")
STDIN_PATH = "stdin.dstack.yml"


def read_config(path: str) -> tuple[str, str]:
    """(text, path as sent to the server); `-` reads stdin."""
    if path == "-":
        return sys.stdin.read(), STDIN_PATH
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: no such configuration file")
    return file.read_text(), path


def print_problems(exc: ConfigError) -> None:
    for problem in exc.problems:
        err().print(f"[red]error:[/red] {problem.format()}")


def _archives(client: Client, text: str, path: str) -> list[dict[str, str]]:
    """Upload what a run's local `repos`/`files` bring (see `uploading`)."""
    config = parse_config(text, path)
    for warning in config_warnings(config, text, path):  # shown with the plan, never fatal
        err().print(f"[yellow]warning:[/yellow] {warning.format()}", highlight=False)
    if str(config.type) not in RUN_KINDS:
        return []
    config_dir = Path.cwd() if path == STDIN_PATH else Path(path).resolve().parent
    return upload_local(client, config.normalized(), config_dir)


def _apply(
    client: Client, text: str, path: str, *, yes: bool, force: bool
) -> dict[str, object] | None:
    archives = _archives(client, text, path)
    plan = client.get_plan(text, path, file_archives=archives)
    show_plan({**plan, "path": path}, client.project, client.me().username)
    if is_noop(plan) and not force:
        out().print("Detected no changes.")
        return None
    if not yes and not typer.confirm(question(plan), default=False):
        out().print("Cancelled.")
        return None
    return client.apply(text, path, force=force, file_archives=archives)


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
