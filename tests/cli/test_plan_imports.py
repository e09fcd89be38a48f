"""The offline `dockyard plan` loads only what planning needs (issue 26; bench/cli.py).

Behaviour, not wall time: a fresh interpreter runs the `dockyard` entry point on a tiny real
config repo (`plan --base`) and reports `sys.modules` at exit. The offline plan must not
import SQLAlchemy, alembic, asyncssh, httpx, FastAPI, the agent client, the store or the
engine's runtime (only the plan function and its pure checks: `reconciler.engine.planning`,
`policing`, `costing`). `dockyard plan --help` imports not even the config models, git or pydantic.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from reconciler.adapters.db.connecting import DEFAULT_DATA_DIR
from reconciler.adapters.gitsource.remotes import DEFAULT_TOKEN_ENV
from reconciler.cli import plan as plan_cli
from tests.pr.gitrepo import commit_files, make_repo

SERVER_SIDE = ("sqlalchemy", "alembic", "asyncssh", "httpx", "fastapi", "uvicorn")
SERVER_MODULES = ("agent.client", "reconciler.adapters.db", "reconciler.api")
PLAN_FUNCTION = {
    "reconciler.engine",
    "reconciler.engine.planning",
    "reconciler.engine.policing",
    "reconciler.engine.costing",
}

# Runs the console script's `run()` as `dockyard ARGS` and prints the modules at exit.
_PROBE = """
import json, sys
sys.argv = ["dockyard", *sys.argv[1:]]
from reconciler.cli.main import run
code = 0
try:
    run()
except SystemExit as exc:
    code = exc.code
modules = sorted(sys.modules)
import linecache
from pydantic import BaseModel
built = [
    f"{cls.__module__}.{cls.__qualname__}"
    for name, module in list(sys.modules.items()) if name.startswith("schemas.")
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == name
    and cls.__pydantic_complete__
] if "pydantic" in sys.modules else []
print("MODULES " + json.dumps({"code": code, "modules": modules,
    "built": sorted(built), "sources_read": sorted(linecache.cache)}))
"""


def _probe(*args: str, tmp_path: Path) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "120"},
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("MODULES ")), None)
    assert line is not None, done.stdout + done.stderr
    return json.loads(line.removeprefix("MODULES ")), done.stdout


def _modules_of(*args: str, tmp_path: Path) -> tuple[int, set[str], str]:
    found, out = _probe(*args, tmp_path=tmp_path)
    return found["code"], set(found["modules"]), out


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_the_offline_plan_imports_no_server_side(tmp_path: Path) -> None:
    task = b"type: task\nname: train\ncommands: [python train.py]\n"
    repo, base = make_repo(tmp_path / "configs", {"train.dstack.yml": task})
    commit_files(repo, {"train.dstack.yml": task.replace(b"train.py", b"t2.py")}, "change")
    code, modules, out = _modules_of("plan", "--repo", str(repo), "--base", base, tmp_path=tmp_path)
    assert code == 0, out
    assert "1 replace" in out  # it planned: the parser and the planner did run
    assert {"schemas", "reconciler.core.planning", "reconciler.engine.planning"} <= modules
    assert _loaded(modules, SERVER_SIDE) == []
    assert _loaded(modules, SERVER_MODULES) == []
    assert _loaded(modules, ("reconciler.engine",)) <= sorted(PLAN_FUNCTION)


def test_the_offline_plan_builds_only_the_planned_kinds_models(tmp_path: Path) -> None:
    # pydantic builds a model's validator when it first validates (defer_build), and no
    # model's source is parsed for its field docstrings (that is the JSON Schema's job)
    task = b"type: task\nname: train\ncommands: [python train.py]\n"
    repo, base = make_repo(tmp_path / "configs", {"train.dstack.yml": task})
    commit_files(repo, {"train.dstack.yml": task.replace(b"train.py", b"t2.py")}, "change")
    found, out = _probe("plan", "--repo", str(repo), "--base", base, tmp_path=tmp_path)
    assert found["code"] == 0, out
    assert "schemas.runs.TaskConfiguration" in found["built"]
    not_built = ("ServiceConfiguration", "GatewayConfiguration", "PresetConfiguration")
    assert [m for m in found["built"] if m.rsplit(".", 1)[-1] in not_built] == []
    assert [p for p in found["sources_read"] if "/schemas/" in p] == []


def test_plan_help_imports_neither_config_models_nor_git(tmp_path: Path) -> None:
    code, modules, out = _modules_of("plan", "--help", tmp_path=tmp_path)
    assert code == 0, out
    assert "--base" in out and DEFAULT_TOKEN_ENV in out  # the default it names is the real one
    assert _loaded(modules, ("schemas", "git", "reconciler.engine", *SERVER_SIDE)) == []
    # nor pydantic: typer coerces an unset root `--help` through a TypeAdapter otherwise
    assert _loaded(modules, ("pydantic", "pydantic_core", "typer._adapters")) == []


def test_plan_imports_few_modules_beyond_the_root_help(tmp_path: Path) -> None:
    # `dockyard --help` (typer, rich) is the floor; counted 332 modules with the lock's
    # versions, `plan --help` 333 (433 before it stopped importing pydantic) and the
    # offline plan 523 (the config models, pydantic, git, the planner, rich's table)
    task = b"type: task\nname: train\ncommands: [python train.py]\n"
    repo, base = make_repo(tmp_path / "configs", {"train.dstack.yml": task})
    commit_files(repo, {"train.dstack.yml": task.replace(b"train.py", b"t2.py")}, "change")
    _, root_help, _ = _modules_of("--help", tmp_path=tmp_path)
    _, plan_help, _ = _modules_of("plan", "--help", tmp_path=tmp_path)
    code, plan, out = _modules_of("plan", "--repo", str(repo), "--base", base, tmp_path=tmp_path)
    assert code == 0, out
    assert len(plan_help) - len(root_help) <= 5, sorted(plan_help - root_help)
    assert len(plan) - len(root_help) <= 200, len(plan)


def test_the_cli_default_data_dir_is_the_servers() -> None:
    assert plan_cli.DEFAULT_DATA_DIR == DEFAULT_DATA_DIR
