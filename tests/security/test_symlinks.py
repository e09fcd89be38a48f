"""A config committed as a symbolic link is an error with its path, never read (finding 10).

The attack form: `secrets.dstack.yml` committed as a link to `/etc/passwd`. Before,
`dockyard validate` printed the first line of the target and the reconcile skipped the
file silently. Now `validate`, the reconcile's snapshots (first listed and advanced by a
diff) and `dockyard plan` report the link by its path, and nothing of the target shows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from reconciler.adapters.gitsource.documents import LINK_MESSAGE
from reconciler.cli.main import build_app
from reconciler.cli.validate import check_file
from tests.gitsource.conftest import TASK, ConfigRepo, config_repo, data_dir, make_source

__all__ = ["config_repo", "data_dir"]  # fixtures

TARGET = "/etc/passwd"
SECRET_LINE = Path(TARGET).read_text().splitlines()[0]


def test_validate_reports_a_link_and_never_reads_its_target(tmp_path: Path) -> None:
    (tmp_path / "train.dstack.yml").write_text(TASK.format(name="train", command="a"))
    os.symlink(TARGET, tmp_path / "secrets.dstack.yml")
    report = check_file(tmp_path / "secrets.dstack.yml")
    (problem,) = report.problems
    assert problem.path == str(tmp_path / "secrets.dstack.yml")
    assert "symbolic link" in problem.message
    assert report.text == ""
    result = CliRunner().invoke(build_app(), ["validate", str(tmp_path)])
    assert result.exit_code == 1
    assert "secrets.dstack.yml" in result.stdout and "symbolic link" in result.stdout
    assert SECRET_LINE not in result.stdout and "root:" not in result.stdout
    as_json = CliRunner().invoke(build_app(), ["validate", "--json", str(tmp_path)])
    assert SECRET_LINE not in as_json.stdout


def test_validate_refuses_a_20_mb_file_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.dstack.yml"
    with big.open("wb") as handle:
        handle.truncate(20 * 2**20)
    (problem,) = check_file(big).problems
    assert "config-max-bytes" in problem.message


def _commit_link(repo: ConfigRepo) -> str:
    """Commit `secrets.dstack.yml` -> /etc/passwd as git stores links (mode 120000)."""
    os.symlink(TARGET, repo.path / "secrets.dstack.yml")
    repo.repo.git.add("secrets.dstack.yml")
    repo.repo.git.commit("-q", "-m", "a link")
    assert repo.repo.git.ls_tree("HEAD", "secrets.dstack.yml").startswith("120000")
    return str(repo.repo.head.commit.hexsha)


def test_the_reconcile_reports_a_committed_link(config_repo: ConfigRepo, data_dir: Path) -> None:
    config_repo.write("train.dstack.yml", TASK.format(name="train", command="a"))
    first = config_repo.commit("one")
    second = _commit_link(config_repo)
    advanced = make_source(config_repo.path, data_dir / "advanced")
    advanced.fetch()
    advanced.load(advanced.snapshot(first))
    listed = make_source(config_repo.path, data_dir / "listed")
    listed.fetch()
    for source in (advanced, listed):  # the snapshot advanced by a diff, and listed whole
        desired = source.load(source.snapshot(second)).desired
        (issue,) = desired.issues
        assert (issue.path, issue.message) == ("secrets.dstack.yml", LINK_MESSAGE)
        assert not desired.ok  # a commit with a link is not applied
        assert SECRET_LINE not in str(issue)


def test_plan_reports_a_committed_link(config_repo: ConfigRepo, data_dir: Path) -> None:
    config_repo.write("train.dstack.yml", TASK.format(name="train", command="a"))
    first = config_repo.commit("one")
    _commit_link(config_repo)
    result = CliRunner().invoke(
        build_app(),
        ["plan", "--repo", str(config_repo.path), "--base", first,
         "--data-dir", str(data_dir), "--format", "json"],
    )  # fmt: skip
    assert SECRET_LINE not in result.stdout
    errors = json.loads(result.stdout)["errors"]
    assert any("secrets.dstack.yml" in json.dumps(e) and "symbolic link" in json.dumps(e)
               for e in errors), errors  # fmt: skip


def test_plan_reads_configs_within_the_configured_limits(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    config_repo.write("train.dstack.yml", TASK.format(name="train", command="a"))
    first = config_repo.commit("one")
    config_repo.write("big.dstack.yml", TASK.format(name="big", command="b" * 300))
    config_repo.commit("big")
    result = CliRunner().invoke(
        build_app(),
        ["plan", "--repo", str(config_repo.path), "--base", first,
         "--data-dir", str(data_dir), "--format", "json"],
        env={"DOCKYARD_CONFIG_MAX_BYTES": "200"},
    )  # fmt: skip
    errors = json.dumps(json.loads(result.stdout)["errors"])
    assert "big.dstack.yml" in errors and "config-max-bytes" in errors
