"""`dockyard db backup` and `db restore`: the database and the data dir's keys, as one folder.

A backup is a folder: `dockyard.db` (SQLite's online backup API: a consistent copy taken while
the server runs and writes; a PostgreSQL database is dumped with `pg_dump` instead, see
docs/operations.md), the data dir's keys and state that the database alone cannot rebuild
(`KEPT`: the secrets key without which stored secrets cannot be read, the admin token, the
server's SSH key the agents trust, Pulumi's file-backend state, uploaded archives) and
`manifest.json` (version, schema revision, time, what it holds). Restoring copies it all into
a data dir that has no database yet. Called by `reconciler.cli.db`.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url

from reconciler.adapters.db.connecting import DB_FILE_NAME, create_db_engine
from reconciler.adapters.db.migrating import current_revision
from reconciler.adapters.db.replicas import dockyard_version
from reconciler.errors import UsageError

KEPT = ("secrets.key", "admin-token", "console-key", "ssh", "pulumi", "files")
MANIFEST = "manifest.json"
PAGES_PER_STEP = 1024  # the online copy lets writers in between steps


@dataclass(frozen=True, slots=True)
class BackupReport:
    folder: Path
    database: str  # "sqlite" | "postgresql"
    revision: str | None
    items: tuple[str, ...]


def _sqlite_file(db_url: str) -> Path | None:
    url = make_url(db_url)
    if url.get_backend_name() != "sqlite":
        return None
    if not url.database or url.database == ":memory:":
        raise UsageError("an in-memory database has nothing to back up")
    return Path(url.database)


def _copy_sqlite(source: Path, target: Path) -> None:
    """SQLite's online backup: consistent even while another process writes."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        with dst:
            src.backup(dst, pages=PAGES_PER_STEP)
        if dst.execute("PRAGMA integrity_check").fetchone() != ("ok",):
            raise UsageError(f"the copy of {source} failed SQLite's integrity check")
    finally:
        src.close()
        dst.close()


def _revision(db_url: str) -> str | None:
    engine = create_db_engine(db_url)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


def _copy_item(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(source, target)


def backup(db_url: str, data_dir: Path, folder: Path) -> BackupReport:
    """Write a backup of the database at `db_url` and `data_dir`'s keys into `folder` (new)."""
    if folder.exists() and any(folder.iterdir()):
        raise UsageError(f"{folder} is not empty: back up into a new folder")
    database = _sqlite_file(db_url)
    if database is not None and not database.exists():
        raise UsageError(f"no database at {database}: is --data-dir/--db right?")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)  # keys and secrets: the server's only
    revision = _revision(db_url)
    if database is not None:
        _copy_sqlite(database, folder / DB_FILE_NAME)
    items = tuple(name for name in KEPT if (data_dir / name).exists())
    for name in items:
        _copy_item(data_dir / name, folder / name)
    manifest = {
        "dockyard": dockyard_version(),
        "schema_revision": revision,
        "database": "sqlite" if database is not None else "postgresql",
        "created_at": datetime.now(UTC).isoformat(),
        "items": list(items),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return BackupReport(folder, str(manifest["database"]), revision, items)


def restore(folder: Path, db_url: str, data_dir: Path, *, force: bool = False) -> BackupReport:
    """Copy a backup into `data_dir` (and its SQLite database to `db_url`)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{folder} is not a Dockyard backup (no readable {MANIFEST})") from exc
    database = _sqlite_file(db_url)
    if manifest.get("database") == "sqlite":
        if database is None:
            raise UsageError(
                "this backup holds a SQLite database; restore it into a data dir without --db "
                "(moving to PostgreSQL is not a restore)"
            )
        if database.exists() and not force:
            raise UsageError(
                f"{database} exists: restore into a new data dir, or pass --force to replace it"
            )
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    items = tuple(str(name) for name in manifest.get("items", []) if name in KEPT)
    for name in items:
        _copy_item(folder / name, data_dir / name)
    if manifest.get("database") == "sqlite" and database is not None:
        for stale in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
            stale.unlink(missing_ok=True)
        _copy_sqlite(folder / DB_FILE_NAME, database)
    return BackupReport(
        data_dir, str(manifest.get("database")), manifest.get("schema_revision"), items
    )
