"""What the API-backed CLI commands share: the `--project` option, the client, output.

`open_client(project)` resolves the project from `--project` / `DOCKYARD_PROJECT` / the
default in `~/.dockyard/config.yml` and returns a `Client`. Output goes through rich for
people (`table`, `spinner`) or as indented JSON for programs (`print_json`, nulls kept,
like dstack's `--json`); every table cell is shown as plain, escaped text (`cell`).
Errors are raised as `DockyardError`s; `cli.main` prints them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from rich.text import Text

from reconciler.api import Client
from reconciler.core.escaping import printable

ProjectOption = Annotated[
    str | None,
    typer.Option("--project", help="Project (default: $DOCKYARD_PROJECT, else the default)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
YesOption = Annotated[bool, typer.Option("-y", "--yes", help="Do not ask for confirmation.")]


def out() -> Console:
    return Console(highlight=False, soft_wrap=True)  # long lines (URLs) are not broken


def err() -> Console:
    return Console(stderr=True, highlight=False)


def open_client(project: str | None) -> Client:
    return Client.from_config(project)


def to_jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(value), indent=2, default=str) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> Text:
    """A table cell: plain text, never rich markup (`[link=…]`), with control characters
    and escape sequences shown escaped (`core.escaping.printable`), so a hostile name stays
    one line of text and cannot drive the terminal."""
    if isinstance(value, Text):
        return Text(printable(value.plain), style=value.style)
    return Text("" if value is None else printable(str(value)))


def grid(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> Table:
    """The CLI's borderless table; every cell goes through `cell`."""
    table = Table(box=None, title=title, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(cell(value) for value in row))
    return table


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
    out().print(grid(columns, rows, title))


@contextmanager
def spinner(message: str) -> Iterator[None]:
    """A rich spinner on stderr while the block runs (plain when stderr is not a TTY)."""
    console = err()
    if not console.is_terminal:
        yield
        return
    with console.status(message):
        yield


def ago(when: datetime | None, now: datetime | None = None) -> str:
    """`5 sec ago`, `3 mins ago`, `2 hours ago`, `4 days ago` (dstack's style)."""
    if when is None:
        return ""
    seconds = int(((now or datetime.now(UTC)) - when).total_seconds())
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "min")):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return f"{max(seconds, 0)} sec ago"


def confirm(question: str, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        return bool(typer.confirm(question, default=False))
    return bool(typer.confirm(question, default=False))
