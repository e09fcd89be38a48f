"""Fixtures of the CLI tests: a real server on loopback and a way to run `dockyard …`.

`dockyard` runs in-process (typer's runner) with `DOCKYARD_CONFIG` pointing at the config the
server's first start wrote, so every command goes over real HTTP to the real server.
`DockyardError`s are reported as `cli.main.run` would: one line, exit 1. `cli` has a
stand-in runtime (tests/web/fakes.py: the commands' requests and answers are the subject);
`repo_cli` the real controller on a config repo, for what only the engine decides (a
reconcile's outcome).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli.main import build_app
from reconciler.errors import DockyardError, UsageError
from tests.web.fakes import FakeController
from tests.web.realserver import RealServer, real_server
from tests.web.serving import Running, running_server


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


@dataclass
class Cli:
    server: Running
    env: dict[str, str]

    def __call__(self, *args: str, input: str | None = None) -> Result:
        runner = CliRunner()
        result = runner.invoke(build_app(), list(args), env=self.env, input=input)
        if isinstance(result.exception, DockyardError):
            code = 2 if isinstance(result.exception, UsageError) else 1
            return Result(code, result.stdout, f"error: {result.exception}")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Result(result.exit_code, result.stdout, result.stderr)

    def subprocess(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The real console script (for what only `cli.main.run` does: one-line errors)."""
        code = "from reconciler.cli.main import run; run()"
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    with running_server(tmp_path, lambda settings, store: FakeController(store)) as server:
        env = {
            "DOCKYARD_CONFIG": str(server.settings.cli_config),
            "HOME": str(tmp_path / "home"),
            "DOCKYARD_PROJECT": "",
            "COLUMNS": "200",
        }
        yield Cli(server, env)


@dataclass
class RepoCli(Cli):
    real: RealServer


@pytest.fixture
def repo_cli(tmp_path: Path) -> Iterator[RepoCli]:
    with real_server(tmp_path) as real:
        env = {
            "DOCKYARD_CONFIG": str(real.running.settings.cli_config),
            "HOME": str(tmp_path / "home"),
            "DOCKYARD_PROJECT": "",
            "COLUMNS": "200",
        }
        yield RepoCli(real.running, env, real)
