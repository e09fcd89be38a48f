"""The CLI loads a command's module only when that command runs (fast start, bench/cli.py).

Behaviour, not wall time: `dockyard --help` in a fresh interpreter imports no SQLAlchemy,
FastAPI or config models; `dockyard ps`'s module imports no SQLAlchemy or FastAPI; the
command table in `reconciler.cli.commands` agrees with what the modules register.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from reconciler.cli.commands import COMMANDS, load_module_commands
from reconciler.cli.main import build_app

HEAVY = ("sqlalchemy", "fastapi", "alembic", "uvicorn")

_PROBE = """
import json, sys
sys.argv = ["dockyard", *sys.argv[1:]]
from reconciler.cli.main import run
try:
    run()
except SystemExit:
    pass
roots = sorted({m.split(".")[0] for m in sys.modules})
print("MODULES " + json.dumps(roots))
"""


def _imported_by(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def test_help_imports_no_database_web_or_config_models() -> None:
    roots = _imported_by("--help")
    assert not roots & {*HEAVY, "schemas", "httpx"}, roots


def test_ps_module_imports_no_database_or_web_framework() -> None:
    code = (
        "import sys\n"
        "from reconciler.cli.commands import load_module_commands\n"
        "load_module_commands('ps')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    roots = set(eval(done.stdout))  # a printed list of names
    assert not roots & {*HEAVY, "schemas"}, roots


@pytest.mark.parametrize("module", sorted({entry.module for entry in COMMANDS}))
def test_table_matches_what_each_module_registers(module: str) -> None:
    registered = load_module_commands(module)
    listed = {e.name: e.help for e in COMMANDS if e.module == module}
    assert set(registered) == set(listed)
    for name, command in registered.items():
        shown = (command.short_help or command.help or "").splitlines()[0]
        assert shown == listed[name], "keep COMMANDS in reconciler/cli/commands.py in step"


def test_help_lists_every_command_and_each_command_has_help() -> None:
    runner = CliRunner()
    root = runner.invoke(build_app(), ["--help"], env={"COLUMNS": "200"})
    assert root.exit_code == 0, root.output
    for entry in COMMANDS:
        assert entry.name in root.output
        sub = runner.invoke(build_app(), [entry.name, "--help"], env={"COLUMNS": "200"})
        assert sub.exit_code == 0, (entry.name, sub.output)


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(build_app(), ["pss"])
    assert result.exit_code == 2
    assert "No such command" in result.output
