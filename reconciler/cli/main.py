"""Entry point of the `dockyard` command: builds the typer app from the command modules.

Each command module exposes `register(app)`; add new modules to `_COMMAND_MODULES`.
`run()` is the console script: it turns every `DockyardError` and `schemas.ConfigError`
into one clear line and a non-zero exit, so no traceback reaches the user.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console

from reconciler.errors import DockyardError, UsageError

_COMMAND_MODULES: tuple[str, ...] = (
    "db",
    "plan",
    "server",
    "apply",
    "ps",
    "run",
    "logs",
    "stop",
    "resources",
    "event",
    "reconcile",
    "delivery",
    "project",
    "secret",
    "validate",
    "schema",
    "offer",
    "attach",
    "pr",
)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="dockyard",
        help="GitOps for GPU workloads: dstack configurations reconciled from Git.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for module_name in _COMMAND_MODULES:
        module = importlib.import_module(f"reconciler.cli.{module_name}")
        module.register(app)
    return app


def run() -> None:
    err = Console(stderr=True)
    try:
        app = build_app()
        app(standalone_mode=True)
    except UsageError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(2)
    except DockyardError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
