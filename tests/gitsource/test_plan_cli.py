"""`dockyard plan` end to end: real repos, offline `--base`, and the store on both databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from reconciler.adapters.db import Store
from reconciler.cli import plan as plan_cli
from reconciler.cli.main import build_app
from reconciler.domain.observed import to_cli_origin, to_git_origin
from schemas import parse_config
from tests.gitsource.conftest import SERVICE, TASK, VOLUME, ConfigRepo
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401


def _app() -> typer.Typer:
    app = typer.Typer()
    plan_cli.register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps `plan` a subcommand
        """Unused."""

    return app


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(_app(), ["plan", *args])
    return result.exit_code, result.stdout


def _two_commits(repo: ConfigRepo) -> tuple[str, str]:
    repo.write("web.dstack.yml", SERVICE.format(image="nginx"))
    repo.write("data.dstack.yml", VOLUME)
    repo.write("train.dstack.yml", TASK.format(name="train", command="a"))
    first = repo.commit("one")
    repo.write("web.dstack.yml", SERVICE.format(image="nginx:2"))
    repo.remove("data.dstack.yml")
    repo.write("eval.dstack.yml", TASK.format(name="eval", command="b"))
    return first, repo.commit("two")


def test_plan_is_a_command_of_dockyard() -> None:
    result = CliRunner().invoke(build_app(), ["plan", "--help"])
    assert result.exit_code == 0
    assert "--base" in result.stdout


def test_offline_plan_against_a_base_commit_as_json(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    first, second = _two_commits(config_repo)
    code, out = _run(
        "--repo", str(config_repo.path), "--base", first, "--data-dir", str(data_dir),
        "--format", "json",
    )  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    assert (data["commit"], data["base"], data["errors"]) == (second, first, [])
    actions = {(a["action"], a["kind"], a["name"]) for a in data["actions"]}
    assert actions == {
        ("update", "service", "web"),
        ("create", "task", "eval"),
        ("retain", "volume", "data"),
        ("noop", "task", "train"),
        ("noop", "fleet", "local"),
    }
    assert data["summary"]["update"] == 1
    assert not (data_dir / "dockyard.db").exists()  # offline: no store touched


def test_offline_plan_as_markdown_and_table(config_repo: ConfigRepo, data_dir: Path) -> None:
    first, _ = _two_commits(config_repo)
    common = ("--repo", str(config_repo.path), "--base", first, "--data-dir", str(data_dir))
    code, markdown = _run(*common, "--format", "markdown")
    assert code == 0
    assert markdown.startswith("### Dockyard plan for")
    assert "<details>" in markdown
    code, table = _run(*common)
    assert code == 0
    assert "rolling update" in table and "1 create, 1 update, 1 retain, 2 noop" in table


def test_a_plan_with_errors_exits_1(config_repo: ConfigRepo, data_dir: Path) -> None:
    first, _ = _two_commits(config_repo)
    config_repo.write("dup.dstack.yml", SERVICE.format(image="other"))
    config_repo.commit("duplicate web")
    code, out = _run(
        "--repo", str(config_repo.path), "--base", first, "--data-dir", str(data_dir),
        "--format", "json",
    )  # fmt: skip
    assert code == 1
    data = json.loads(out)
    assert data["actions"] == []
    assert data["errors"][0]["path"] == "web.dstack.yml"
    assert "also declared in dup.dstack.yml" in data["errors"][0]["message"]


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


def test_plan_against_what_the_store_says_is_deployed(
    config_repo: ConfigRepo, data_dir: Path, db_url: str
) -> None:
    first, second = _two_commits(config_repo)
    store = Store.from_url(db_url, migrate=True)
    try:
        for path, text in [("web.dstack.yml", SERVICE.format(image="nginx")),
                           ("data.dstack.yml", VOLUME)]:  # fmt: skip
            model = parse_config(text.encode(), path)
            store.record_resource(
                "main", model.type, str(model.name), origin=to_git_origin(path, first),
                path=path, commit=first, spec=model.normalized(), spec_hash=model.spec_hash(),
                status="running",
            )  # fmt: skip
        manual = parse_config(TASK.format(name="adhoc", command="x").encode(), "adhoc.yml")
        store.record_resource(
            "main", "task", "adhoc", origin=to_cli_origin("alice"), path=None, commit=None,
            spec=manual.normalized(), spec_hash=manual.spec_hash(), status="running",
        )  # fmt: skip
    finally:
        store.close()
    code, out = _run(
        "--repo", str(config_repo.path), "--db", db_url, "--data-dir", str(data_dir),
        "--format", "json",
    )  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    assert data["commit"] == second
    actions = {(a["action"], a["kind"], a["name"]) for a in data["actions"]}
    assert actions == {
        ("update", "service", "web"),
        ("create", "task", "train"),
        ("create", "task", "eval"),
        ("create", "fleet", "local"),
        ("retain", "volume", "data"),
        ("noop", "task", "adhoc"),
    }


def test_an_unmigrated_store_is_a_clear_error(
    config_repo: ConfigRepo, data_dir: Path, tmp_path: Path
) -> None:
    _two_commits(config_repo)
    result = CliRunner().invoke(
        _app(),
        ["plan", "--repo", str(config_repo.path), "--db", f"sqlite:///{tmp_path / 'empty.db'}",
         "--data-dir", str(data_dir)],
    )  # fmt: skip
    assert result.exit_code != 0
    assert "dockyard db upgrade" in str(result.exception)
