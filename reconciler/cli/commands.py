"""The table of `dockyard`'s commands and the click group that loads each one on demand.

`cli.main` builds the app on `LazyGroup`: `dockyard --help` lists `COMMANDS` from this table
without importing any command module, and `dockyard <name> …` imports only the module that
registers `<name>` (so `dockyard ps` never imports SQLAlchemy, FastAPI or the config models).
Each command module exposes `register(app)`; add a row here when a module adds a command
(tests/cli/test_startup.py checks that the table and the modules agree).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import typer
from typer import _click as click
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.main import get_group


@dataclass(frozen=True)
class CommandEntry:
    """One top-level command: its module under `reconciler.cli` and its one-line help."""

    name: str
    module: str
    help: str


COMMANDS: tuple[CommandEntry, ...] = (
    CommandEntry(
        "apply",
        "apply",
        "Apply a configuration: show the plan and offers, confirm, create or update it.",
    ),
    CommandEntry(
        "attach",
        "attach",
        "Forward a run's ports, write its SSH alias, optionally stream its logs.",
    ),
    CommandEntry("backend", "backend", "Show the server's cluster backends (Slurm, Kubernetes)."),
    CommandEntry(
        "delete",
        "delete",
        "Delete what a configuration file describes (a run, fleet, volume or gateway).",
    ),
    CommandEntry("event", "event", "List events."),
    CommandEntry("fleet", "resources", "List, inspect and delete fleets."),
    CommandEntry("gateway", "resources", "List, inspect and delete gateways."),
    CommandEntry("logs", "logs", "Print a run's job logs."),
    CommandEntry("metrics", "metrics", "Show a run's metrics: CPU, memory and GPUs of each job."),
    CommandEntry(
        "offer",
        "offer",
        "List GPU offers: the project's instances that fit, then its clouds' catalog offers.",
    ),
    CommandEntry("project", "project", "Manage configured projects."),
    CommandEntry("ps", "ps", "List runs."),
    CommandEntry("run", "run", "Inspect runs."),
    CommandEntry("secret", "secret", "Manage project secrets."),
    CommandEntry("source", "sources", "Manage the config repos the server follows."),
    CommandEntry("server", "server", "Start the server."),
    CommandEntry(
        "stop", "stop", "Stop a run (its jobs get SIGTERM, then SIGKILL after stop_duration)."
    ),
    CommandEntry("volume", "resources", "List, inspect and delete volumes."),
    CommandEntry(
        "plan",
        "plan",
        "Plan a commit of the config repo on the server (live state) or offline (--base).",
    ),
    CommandEntry(
        "validate",
        "validate",
        "Check dstack configuration files: every problem with file, line and column.",
    ),
    CommandEntry("pr", "pr", "Pull requests: post the plan as a comment and a commit status."),
    CommandEntry("reconcile", "reconcile", "Run and inspect GitOps reconciles."),
    CommandEntry("delivery", "delivery", "Webhook deliveries."),
    CommandEntry("notification", "notification", "Notifications: receivers and deliveries."),
    CommandEntry(
        "schema",
        "schema",
        "Print the JSON Schema of .dstack.yml files, or write/check `schemas/json/`.",
    ),
    CommandEntry("db", "db", "Manage the state database."),
)


def load_module_commands(module: str) -> dict[str, click.Command]:
    """Import `reconciler.cli.<module>` and return the click commands its `register` adds."""
    app = typer.Typer()
    importlib.import_module(f"reconciler.cli.{module}").register(app)
    return dict(get_group(app).commands)


class LazyGroup(TyperGroup):
    """dockyard's root group: commands come from `COMMANDS`, their modules load on use.

    While the root help is being rendered, `get_command` answers a placeholder carrying the
    table's one-line help, so listing the commands imports none of them.
    """

    _listing_help = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [entry.name for entry in COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        loaded = self.commands.get(cmd_name)
        if loaded is not None:
            return loaded
        entry = next((e for e in COMMANDS if e.name == cmd_name), None)
        if entry is None:
            return None
        if self._listing_help:
            return TyperCommand(name=entry.name, short_help=entry.help)
        self.commands.update(load_module_commands(entry.module))
        return self.commands.get(cmd_name)

    def get_help_option(self, ctx: click.Context) -> TyperOption | None:
        option = super().get_help_option(ctx)
        if option is not None:
            # `dockyard plan --help` passes no `--help` to this root group: its unset value
            # (None) would be coerced by typer through a pydantic TypeAdapter, importing
            # pydantic (about 100 modules, 0.1 s) for a flag; False is a bool, used as is.
            option.default = False
        return option

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing_help = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing_help = False
