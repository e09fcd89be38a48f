"""`dockyard db backup PATH` and `dockyard db restore PATH`: see docs/operations.md, Backups.

The work is `reconciler.adapters.db.backup`'s; this module only parses flags and prints what
was saved or restored. Registered on the `db` command group by `reconciler.cli.db`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from reconciler.adapters.db.connecting import default_data_dir, redact_url, resolve_db_url

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", envvar="DOCKYARD_DB", help="Database URL; default: SQLite in the data dir."
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", envvar="DOCKYARD_DATA_DIR", help="Data directory (~/.dockyard/data)."
    ),
]


def register_backup(db_app: typer.Typer) -> None:
    @db_app.command("backup")
    def backup(
        path: Annotated[Path, typer.Argument(help="A new folder to write the backup into.")],
        db: DbOption = None,
        data_dir: DataDirOption = None,
    ) -> None:
        """Back up the database (SQLite: online, while the server runs) and the data dir's keys."""
        from reconciler.adapters.db.backup import backup as run_backup

        directory = (data_dir or default_data_dir()).expanduser()
        url = resolve_db_url(db, directory)
        report = run_backup(url, directory, path)
        console = Console()
        console.print(
            f"Backed up {redact_url(url)} (schema {report.revision}) and "
            f"{', '.join(report.items) or 'no key files'} into {report.folder}",
            highlight=False,
        )
        if report.database == "postgresql":
            console.print(
                "The PostgreSQL database itself is not in it: dump it with pg_dump "
                "(docs/operations.md, Backups).",
                highlight=False,
            )

    @db_app.command("restore")
    def restore(
        path: Annotated[Path, typer.Argument(help="A folder `dockyard db backup` wrote.")],
        db: DbOption = None,
        data_dir: DataDirOption = None,
        force: Annotated[
            bool, typer.Option("--force", help="Replace an existing SQLite database.")
        ] = False,
    ) -> None:
        """Restore a backup into a data dir (start the server on it afterwards)."""
        from reconciler.adapters.db.backup import restore as run_restore

        directory = (data_dir or default_data_dir()).expanduser()
        url = resolve_db_url(db, directory)
        report = run_restore(path, url, directory, force=force)
        Console().print(
            f"Restored schema {report.revision} and {', '.join(report.items) or 'no key files'} "
            f"into {directory}; start the server with --data-dir {directory}",
            highlight=False,
        )
