"""`dockyard validate` and `dockyard schema`: output formats and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from reconciler.cli import schema, validate

GOOD = "type: task\nname: train\ncommands: [python train.py]\n"
BAD = "type: task\nname: train\ncomands: [python train.py]\nresources:\n  gpu: A100::2\n"


def app() -> typer.Typer:
    application = typer.Typer()

    @application.callback()
    def main() -> None:
        """Test app with only the commands under test."""

    validate.register(application)
    schema.register(application)
    return application


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app(), list(args))
    return result.exit_code, result.output


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_all_valid_exits_zero(tmp_path: Path) -> None:
    write(tmp_path, "train.dstack.yml", GOOD)
    code, output = run("validate", str(tmp_path))
    assert code == 0
    assert "train.dstack.yml: ok (task train)" in output


def test_invalid_prints_location_caret_and_hint(tmp_path: Path) -> None:
    bad = write(tmp_path, "sub/bad.dstack.yaml", BAD)
    write(tmp_path, ".dstack.yml", GOOD)
    write(tmp_path, "notes.yml", "not: a config")
    write(tmp_path, ".git/x.dstack.yml", "garbage: [")
    code, output = run("validate", str(tmp_path))
    assert code == 1
    lines = output.splitlines()
    first = lines.index(f"{bad}:3:1: comands: unknown field `comands`")
    assert lines[first + 1 : first + 4] == [
        "    comands: [python train.py]",
        "    ^",
        "    hint: did you mean `commands`?",
    ]
    assert any(line.startswith(f"{bad}:5:8: resources.gpu: ") for line in lines)
    assert lines[-1] == "2 file(s) checked, 1 invalid (2 problem(s))"


def test_json_output(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.dstack.yml", BAD)
    good = write(tmp_path, "good.dstack.yml", GOOD)
    code, output = run("validate", "--json", str(bad), str(good))
    assert code == 1
    reports = json.loads(output)
    assert [r["path"] for r in reports] == [str(bad), str(good)]
    assert reports[0]["valid"] is False
    assert (reports[0]["type"], reports[0]["name"]) == ("task", "train")
    assert reports[0]["errors"][0] == {
        "line": 3,
        "column": 1,
        "field": "comands",
        "message": "unknown field `comands`",
        "hint": "did you mean `commands`?",
    }
    assert reports[1] == {
        "path": str(good),
        "valid": True,
        "type": "task",
        "name": "train",
        "errors": [],
        "warnings": [],
    }


def test_explicit_file_is_checked_whatever_its_name(tmp_path: Path) -> None:
    path = write(tmp_path, "config.yaml", "type: gateway\n")
    code, output = run("validate", str(path))
    assert code == 1
    assert "missing required field" in output


def test_usage_errors_exit_two(tmp_path: Path) -> None:
    assert run("validate", str(tmp_path / "missing"))[0] == 2
    assert run("validate", str(tmp_path))[0] == 2  # no configuration files


def test_schema_write_then_check(tmp_path: Path) -> None:
    assert run("schema", "--check", "--dir", str(tmp_path))[0] == 1
    assert run("schema", "--write", "--dir", str(tmp_path))[0] == 0
    assert run("schema", "--check", "--dir", str(tmp_path))[0] == 0
    code, output = run("schema", "--type", "task")
    assert code == 0
    assert json.loads(output)["title"] == "TaskConfiguration"


LEGACY = """type: task
name: legacy
commands: [python train.py]
working_dir: src
"""

SSH_SPOT = """type: fleet
name: hosts
spot_policy: spot
ssh_config:
  user: ubuntu
  identity_file: ~/.ssh/id_rsa
  hosts: [10.0.0.1]
"""


def test_warnings_are_shown_and_do_not_fail(tmp_path: Path) -> None:
    legacy = write(tmp_path, "legacy.dstack.yml", LEGACY)
    fleet = write(tmp_path, "hosts.dstack.yml", SSH_SPOT)
    code, output = run("validate", str(legacy), str(fleet))
    assert code == 0, output
    lines = output.splitlines()
    assert f"{legacy}: ok (task legacy)" in lines
    assert any(
        line.startswith(f"{legacy}:4:1: warning: working_dir: a relative working_dir is legacy")
        and line.endswith("it resolves to /workflow/src")
        for line in lines
    )
    assert f"{fleet}: ok (fleet hosts)" in lines
    assert any(
        line.startswith(f"{fleet}:3:1: warning: spot_policy: ") and "ignored" in line
        for line in lines
    )
    assert lines[-1] == "2 file(s) checked, 0 invalid, 2 warning(s)"


def test_warnings_in_json(tmp_path: Path) -> None:
    legacy = write(tmp_path, "legacy.dstack.yml", LEGACY)
    code, output = run("validate", "--json", str(legacy))
    assert code == 0
    (report,) = json.loads(output)
    assert report["valid"] is True and report["errors"] == []
    assert report["warnings"] == [
        {
            "line": 4,
            "column": 1,
            "field": "working_dir",
            "message": "a relative working_dir is legacy (dstack before 0.20): it resolves to "
            "/workflow/src",
            "hint": "use an absolute path",
        }
    ]


def test_both_nodes_and_ssh_config_is_still_refused(tmp_path: Path) -> None:
    both = write(tmp_path, "both.dstack.yml", SSH_SPOT.replace("spot_policy: spot", "nodes: 2"))
    code, output = run("validate", str(both))
    assert code == 1
    assert "`nodes` and `ssh_config` are mutually exclusive" in output
