"""Warnings of valid files (`schemas.caveats`) travel from the loader into every plan form.

They are shown beside the actions and never fail the plan: a relative `working_dir`
still creates the task, and the plan stays `ok`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from reconciler.cli.main import build_app
from reconciler.core.loading import load_desired, parse_document
from reconciler.core.planning import plan
from reconciler.core.rendering_json import to_json_dict
from reconciler.core.rendering_markdown import render_markdown
from reconciler.core.rendering_table import render_table
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import Plan
from schemas import parse_config
from tests.planning.factories import POLICY

LEGACY = b"type: task\nname: train\ncommands: [python train.py]\nworking_dir: src\n"
FLEET = b"type: fleet\nname: gpus\nnodes: 1\n"


def _plan(*files: tuple[str, bytes]) -> Plan:
    docs = [parse_document(text, path, parse_config) for path, text in files]
    desired = load_desired(docs, commit="c" * 40, policy=POLICY, parse=parse_config)
    return plan(desired, ObservedState(POLICY.project), POLICY)


def test_a_warning_does_not_fail_the_plan() -> None:
    result = _plan(("train.dstack.yml", LEGACY), ("fleet.dstack.yml", FLEET))
    assert result.ok
    assert [a.action.value for a in result.actions if a.name == "train"] == ["create"]
    (warning,) = result.warnings
    assert (warning.path, warning.line, warning.field) == ("train.dstack.yml", 4, "working_dir")


def test_json_lists_warnings_in_the_shape_of_errors() -> None:
    data = to_json_dict(_plan(("train.dstack.yml", LEGACY), ("f.dstack.yml", FLEET)))
    assert data["errors"] == []
    (warning,) = data["warnings"]
    assert list(warning) == ["path", "line", "column", "field", "message"]
    assert warning["path"] == "train.dstack.yml" and "/workflow/src" in warning["message"]


def test_a_plan_without_warnings_has_no_warnings_key() -> None:
    data = to_json_dict(_plan(("f.dstack.yml", FLEET)))
    assert "warnings" not in data


def test_table_and_markdown_show_the_warning() -> None:
    result = _plan(("train.dstack.yml", LEGACY), ("f.dstack.yml", FLEET))
    buffer = io.StringIO()
    Console(width=200, file=buffer, color_system=None).print(render_table(result))
    table = buffer.getvalue()
    assert "warning: train.dstack.yml:4:1 [working_dir]: a relative working_dir is legacy" in table
    markdown = render_markdown(result)
    assert "⚠️ 1 warning(s)" in markdown
    assert "train.dstack.yml:4:1 [working_dir]" in markdown


def test_the_plan_json_keeps_warnings_for_the_pr_comment() -> None:
    from reconciler.pr.document import read_report

    result = _plan(("train.dstack.yml", LEGACY), ("f.dstack.yml", FLEET))
    again = read_report(to_json_dict(result)).plan
    assert again.warnings == result.warnings
    assert render_markdown(again) == render_markdown(result)


def test_dockyard_plan_offline_shows_the_warnings(tmp_path: Path) -> None:
    from tests.gitsource.conftest import ConfigRepo

    repo = ConfigRepo(tmp_path / "configs")
    repo.write("fleet.dstack.yml", FLEET.decode())
    base = repo.commit("base")
    repo.write("train.dstack.yml", LEGACY.decode())
    repo.commit("legacy task")
    args = ["plan", "--repo", str(repo.path), "--base", base, "--data-dir", str(tmp_path / "d")]
    result = CliRunner().invoke(build_app(), [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["errors"] == [] and [w["field"] for w in data["warnings"]] == ["working_dir"]
    table = CliRunner().invoke(build_app(), args, env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "warning: train.dstack.yml:4:1 [working_dir]" in table.stdout
