"""Entry point of the `dockyard` command: the typer app over the lazily loaded commands.

The commands are listed in `reconciler.cli.commands.COMMANDS`; each module is imported only
when its command runs, so `dockyard --help` and `dockyard ps` start fast (bench/cli.py).
`run()` is the console script: it turns every `DockyardError` and `schemas.ConfigError`
into one clear line and a non-zero exit, so no traceback reaches the user.
"""

from __future__ import annotations

import sys

import typer

from reconciler.cli.commands import LazyGroup
from reconciler.errors import DockyardError, UsageError


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="dockyard",
        cls=LazyGroup,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def dockyard() -> None:
        """GitOps for GPU workloads: dstack configurations reconciled from Git."""

    return app


def _print_error(exc: DockyardError) -> None:
    from rich.console import Console
    from rich.markup import escape

    from reconciler.core.escaping import printable

    # the message may quote a name or a file's bytes: shown as text, line by line (its own
    # line breaks, e.g. a caret excerpt, stay), never as rich markup or terminal escapes
    text = "\n".join(printable(line) for line in str(exc).split("\n"))
    Console(stderr=True).print(f"[red]error:[/red] {escape(text)}", highlight=False)


def run() -> None:
    from agent.librarywarnings import show_only_our_warnings

    show_only_our_warnings()  # a library's deprecation notes are not the user's business
    try:
        app = build_app()
        app(standalone_mode=True)
    except UsageError as exc:
        _print_error(exc)
        sys.exit(2)
    except DockyardError as exc:
        _print_error(exc)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
