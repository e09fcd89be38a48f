"""Migrations: from empty to head on both databases, and the models match the scripts."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect
from typer.testing import CliRunner

from reconciler.adapters.db import create_db_engine, current_revision, head_revision
from reconciler.adapters.db.migrating import alembic_config, upgrade_database
from reconciler.adapters.db.models import Base
from reconciler.cli.main import build_app
from tests.services.postgres import PostgresServer


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


def test_upgrade_from_empty_reaches_head_and_matches_models(empty_url: str) -> None:
    engine = create_db_engine(empty_url)
    assert current_revision(engine) is None
    assert upgrade_database(engine) == head_revision()
    tables = set(inspect(engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert diff == []


def test_upgrade_twice_is_a_no_op_and_downgrade_empties(empty_url: str) -> None:
    engine = create_db_engine(empty_url)
    upgrade_database(engine)
    assert upgrade_database(engine) == head_revision()
    with engine.connect() as connection:
        command.downgrade(alembic_config(connection), "base")
        connection.commit()
    remaining = set(inspect(engine).get_table_names()) - {"alembic_version"}
    engine.dispose()
    assert remaining == set()


def test_cli_db_upgrade_creates_sqlite_in_data_dir(tmp_path: Path) -> None:
    runner = CliRunner()
    app = build_app()
    first = runner.invoke(app, ["db", "upgrade", "--data-dir", str(tmp_path / "data")])
    assert first.exit_code == 0, first.output
    assert (tmp_path / "data" / "dockyard.db").exists()
    assert f"empty → {head_revision()}" in first.output
    again = runner.invoke(app, ["db", "upgrade", "--data-dir", str(tmp_path / "data")])
    assert again.exit_code == 0
    assert f"already at revision {head_revision()}" in again.output


def test_cli_db_upgrade_and_current_on_postgres(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    result = CliRunner().invoke(build_app(), ["db", "upgrade", "--db", url])
    assert result.exit_code == 0, result.output
    engine = create_db_engine(url)
    assert current_revision(engine) == head_revision()
    engine.dispose()
    current = CliRunner().invoke(build_app(), ["db", "current", "--db", url])
    assert f"revision {head_revision()}; head {head_revision()}" in current.output


def test_replicas_upgrading_at_once_take_turns(empty_url: str) -> None:
    engines = [create_db_engine(empty_url) for _ in range(3)]
    reached: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(engines))

    def upgrade(engine: Engine) -> None:
        barrier.wait()
        try:
            reached.append(upgrade_database(engine))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=upgrade, args=(engine,)) for engine in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for engine in engines:
        engine.dispose()
    assert errors == []
    assert reached == [head_revision()] * len(engines)
