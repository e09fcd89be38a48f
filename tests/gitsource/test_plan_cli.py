"""`dockyard plan` end to end: real repos, offline `--base`; never a database (`--server`
is tested in tests/pr/test_plan_server.py)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from reconciler.cli import plan as plan_cli
from reconciler.cli.main import build_app
from tests.gitsource.conftest import SERVICE, TASK, VOLUME, ConfigRepo


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
    assert {"eval", "train", "data", "local"} <= {a["name"] for a in data["actions"]}
    assert data["errors"][0]["path"] == "web.dstack.yml"
    assert "also declared in dup.dstack.yml" in data["errors"][0]["message"]


def test_the_cli_never_opens_a_database(config_repo: ConfigRepo, data_dir: Path) -> None:
    _two_commits(config_repo)
    code, _ = _run("--repo", str(config_repo.path), "--db", "sqlite:///x.db")
    assert code == 2  # no such option: live state comes from a server (--server)


def test_without_base_the_plan_asks_the_configured_server(
    config_repo: ConfigRepo, data_dir: Path, tmp_path: Path
) -> None:
    _two_commits(config_repo)
    result = CliRunner().invoke(
        _app(),
        ["plan", "--repo", str(config_repo.path), "--data-dir", str(data_dir)],
        env={"DOCKYARD_CONFIG": str(tmp_path / "none.yml"), "DOCKYARD_PROJECT": ""},
    )
    assert result.exit_code != 0
    assert "no project configured" in str(result.exception)  # not a database


def test_the_offline_plan_says_what_it_could_not_check(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    first, _ = _two_commits(config_repo)
    common = ("--repo", str(config_repo.path), "--base", first, "--data-dir", str(data_dir))
    _, out = _run(*common, "--format", "json")
    unchecked = json.loads(out)["unchecked"]
    assert [line.split(":")[0] for line in unchecked] == [
        "stack previews",
        "capacity",
        "prices",
        "drift",
    ]
    _, table = _run(*common)
    assert "Planned without a server; not checked:" in table and "stack previews" in table
    _, markdown = _run(*common, "--format", "markdown")
    assert "**Planned without a server; not checked:**" in markdown
