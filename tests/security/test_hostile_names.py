"""Hostile names stay text: in the CLI's tables, the plan table, the markdown plan and the
PR comment.

The attack's form: a config repo holds a file whose name carries an OSC 8 hyperlink
(`\\x1b]8;;https://evil.example/\\x1b\\\\`), a clear-screen (`\\x1b[2J`), a carriage return
and a newline, plus `|`, `<img …>` and a backtick; a run's error and a fleet's name carry
the same. Shown raw they would drive the reader's terminal, forge rows, or break out of a
markdown list or table into HTML. Each output must hold no ESC, CR or stray line break
from a name, and the name must still be recognisable, escaped (`core.escaping`).
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.console import Console
from sqlalchemy import select
from typer.testing import CliRunner

from reconciler.adapters.db.models import Fleet, Project, Run
from reconciler.cli import plan as plan_cli
from reconciler.cli.console import grid
from reconciler.core.escaping import markdown_code, markdown_text, printable
from reconciler.domain.kinds import Kind
from reconciler.domain.plan import Action, ActionKind, Plan
from reconciler.pr.commenting import comment_body
from reconciler.pr.reviewing import PlanReport
from tests.cli.conftest import Cli
from tests.cli.conftest import cli as cli  # the fixture
from tests.gitsource.conftest import TASK, ConfigRepo

OSC_LINK = "\x1b]8;;https://evil.example/\x1b\\"
HOSTILE = f"jobs/{OSC_LINK}click\x1b[2J\rfake\nrow|<img src=x onerror=alert(1)>`.dstack.yml"


def _no_raw_controls(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text, repr(text[:400])


def _no_html(text: str) -> None:
    _no_raw_controls(text)
    assert "<img" not in text, "no HTML tag from a name"


def test_printable_escapes_controls_and_keeps_the_name_recognisable() -> None:
    shown = printable(HOSTILE)
    assert shown == (
        "jobs/\\x1b]8;;https://evil.example/\\x1b\\click\\x1b[2J\\rfake\\nrow|"
        "<img src=x onerror=alert(1)>`.dstack.yml"
    )
    assert printable("a\u202egnp.exe\u0085\u2028z") == "a\\u202egnp.exe\\x85\\u2028z"
    assert printable("plain-name ü 名前") == "plain-name ü 名前"
    assert markdown_code("train") == "`train`"
    code = markdown_code(HOSTILE)
    assert code.startswith("<code>") and "\n" not in code and "|" not in code
    assert "`" not in code and "<img" not in code and "&#60;img" in code
    assert markdown_text("a*b*_c_[x](y)") == "a&#42;b&#42;&#95;c&#95;&#91;x&#93;&#40;y&#41;"


def _plan_app() -> typer.Typer:
    app = typer.Typer()
    plan_cli.register(app)

    @app.command("noop")
    def noop() -> None:
        """Unused."""

    return app


def test_the_offline_plan_table_and_markdown_show_a_hostile_file_name_escaped(
    tmp_path: Path,
) -> None:
    repo = ConfigRepo(tmp_path / "configs")
    repo.write("base.dstack.yml", TASK.format(name="base", command="true"))
    first = repo.commit("one")
    repo.write(HOSTILE, TASK.format(name="evil", command="true"))
    repo.write(HOSTILE.replace("jobs/", "bad/"), "type: task\nname: bad\ncomands: [x]\n")
    repo.commit("two")
    common = ["plan", "--repo", str(repo.path), "--base", first, "--data-dir", str(tmp_path / "d")]
    runner = CliRunner()
    table = runner.invoke(_plan_app(), common)
    assert table.exit_code == 1, table.stdout  # the invalid file fails the plan
    _no_raw_controls(table.stdout)
    assert "\\x1b]8;;https:" in table.stdout  # recognisable, escaped
    markdown = runner.invoke(_plan_app(), [*common, "--format", "markdown"])
    _no_html(markdown.stdout)
    error_lines = [line for line in markdown.stdout.splitlines() if "bad/" in line]
    assert len(error_lines) == 1, "the error stays one list item"
    assert "\\x1b[2J\\rfake\\nrow" in error_lines[0]


def _plan_with(name: str, path: str) -> Plan:
    action = Action(
        action=ActionKind.CREATE,
        kind=Kind.TASK,
        name=name,
        project="main",
        path=path,
        reason=f"new in {path}",
        spec={"type": "task", "commands": [name]},
    )
    return Plan(commit="a" * 40, base="b" * 40, actions=(action,))


def test_the_pr_comment_has_no_line_table_or_html_break_from_a_name() -> None:
    plan = _plan_with(f"x{OSC_LINK}|y\nz", HOSTILE)
    body = comment_body(PlanReport(plan, None), limit=65_536)
    _no_html(body)
    assert "onerror" in body and "&#60;img" in body  # shown, as text
    file_lines = [line for line in body.splitlines() if "click" in line]
    assert file_lines and all(line.count("<code>") == line.count("</code>") for line in file_lines)
    summary = next(line for line in body.splitlines() if line.startswith("<summary>"))
    assert "\\x1b]8;;https://evil.example/" in summary and "|y\\nz" in summary


def test_cli_tables_show_names_as_one_escaped_line_without_markup() -> None:
    rows = [
        [f"run{OSC_LINK}\x1b[2J", "local", "[link=https://evil.example]x[/link]"],
        ["second\nforged-row", "local", "[bold red]fake[/]"],
    ]
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, color_system=None, width=200).print(
        grid(["NAME", "BACKEND", "ERROR"], rows)
    )
    text = buffer.getvalue()
    _no_raw_controls(text)
    lines = text.rstrip("\n").splitlines()
    assert len(lines) == 3, lines  # the header and two rows: no forged row
    assert "[link=https://evil.example]x[/link]" in lines[1], "markup is shown, not obeyed"
    assert "second\\nforged-row" in lines[2] and "[bold red]fake[/]" in lines[2]


def test_dockyard_ps_and_fleet_list_escape_names_from_the_server(cli: Cli, tmp_path: Path) -> None:
    """Through the real server and `dockyard ps -a -v` / `dockyard fleet`: a run and a
    fleet whose names carry escapes (rows written directly: the API refuses such names)."""
    config = tmp_path / "ok.dstack.yml"
    config.write_text("type: task\nname: okrun\ncommands: [echo hi]\n")
    assert cli("apply", "-f", str(config), "-y", "-d").exit_code == 0
    with cli.server.server.store.writing() as session:
        run = session.scalars(select(Run).where(Run.run_name == "okrun")).one()
        run.run_name = f"ok{OSC_LINK}x\x1b[2J\nforged-row"
        project = session.scalars(select(Project).where(Project.name == "main")).one()
        session.add(
            Fleet(
                project_id=project.id,
                name=f"fl{OSC_LINK}\x1b[2J\nforged",
                spec={"type": "fleet", "name": "x", "nodes": {"min": 0, "target": 0, "max": 0}},
                status="active",
                created_at=datetime.now(UTC),
                resource_id=None,
            )
        )
    ps = cli("ps", "-a", "-v")
    assert ps.exit_code == 0, ps.stdout
    _no_raw_controls(ps.stdout)
    assert len(ps.stdout.rstrip("\n").splitlines()) == 2, ps.stdout  # header + the run
    assert "\\x1b]8;;https://evil.example/" in ps.stdout and "\\nforged-row" in ps.stdout
    fleets = cli("fleet")
    assert fleets.exit_code == 0, fleets.stdout
    _no_raw_controls(fleets.stdout)
    assert "forged" in fleets.stdout and "\\nforged" in fleets.stdout
    assert not any(line.startswith("forged") for line in fleets.stdout.splitlines())
