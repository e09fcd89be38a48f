"""`dockyard db …`: database maintenance commands (`upgrade`, `current`).

`dockyard db upgrade [--db URL] [--data-dir DIR]` applies the packaged migrations; the server
does the same at start. The work is `reconciler.adapters.db.admin`'s: this is the only CLI
command that opens the server's database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from reconciler.adapters.db.admin import database_revision_at, upgrade_database_at
from reconciler.adapters.db.connecting import redact_url, resolve_db_url
from reconciler.cli.dbbackup import register_backup

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="DOCKYARD_DB",
        help="Database URL (sqlite:///PATH or postgresql+psycopg://...); "
        "default: SQLite in the data dir.",
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar="DOCKYARD_DATA_DIR",
        help="Data directory (default ~/.dockyard/data).",
    ),
]


def register(app: typer.Typer) -> None:
    db_app = typer.Typer(help="Manage the state database.", no_args_is_help=True)

    @db_app.command("upgrade")
    def upgrade(db: DbOption = None, data_dir: DataDirOption = None) -> None:
        """Apply pending schema migrations (creating the database if needed)."""
        url = resolve_db_url(db, data_dir)
        before, after = upgrade_database_at(url)
        console = Console()
        if before == after:
            console.print(f"{redact_url(url)}: already at revision {after}", highlight=False)
        else:
            console.print(
                f"{redact_url(url)}: upgraded {before or 'empty'} → {after}", highlight=False
            )

    @db_app.command("current")
    def current(db: DbOption = None, data_dir: DataDirOption = None) -> None:
        """Show the database's schema revision and the newest one this version ships."""
        url = resolve_db_url(db, data_dir)
        revision, head = database_revision_at(url)
        Console().print(
            f"{redact_url(url)}: revision {revision or 'none (empty)'}; head {head}",
            highlight=False,
        )

    register_backup(db_app)
    app.add_typer(db_app, name="db")
