"""`dockyard db …`: database maintenance commands (`upgrade`, `current`).

`dockyard db upgrade [--db URL] [--data-dir DIR]` applies the packaged migrations; the server
does the same at start. Registered in `reconciler.cli.main._COMMAND_MODULES`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from sqlalchemy.exc import OperationalError

from reconciler.adapters.db.connecting import create_db_engine, redact_url, resolve_db_url
from reconciler.adapters.db.migrating import current_revision, head_revision, upgrade_database
from reconciler.errors import TransientError

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
        engine = create_db_engine(url)
        try:
            before = current_revision(engine)
            after = upgrade_database(engine)
        except OperationalError as exc:
            raise TransientError(f"cannot reach the database {redact_url(url)}") from exc
        finally:
            engine.dispose()
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
        engine = create_db_engine(url)
        try:
            revision = current_revision(engine)
        except OperationalError as exc:
            raise TransientError(f"cannot reach the database {redact_url(url)}") from exc
        finally:
            engine.dispose()
        Console().print(
            f"{redact_url(url)}: revision {revision or 'none (empty)'}; head {head_revision()}",
            highlight=False,
        )

    app.add_typer(db_app, name="db")
