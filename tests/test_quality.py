"""The static checks run as tests: ruff lint, ruff format, mypy --strict, import-linter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize(
    "command",
    [
        ("ruff", "check", "."),
        ("ruff", "format", "--check", "."),
        ("lint-imports",),
    ],
    ids=["ruff-check", "ruff-format", "import-linter"],
)
def test_static_check(command: tuple[str, ...]) -> None:
    result = _run(str(BIN / command[0]), *command[1:])
    assert result.returncode == 0, result.stdout + result.stderr


# A cold mypy --strict of the whole tree (a fresh clone has no cache) takes minutes on a
# loaded 2-core machine: longer than the suite's 300 s per-test limit.
@pytest.mark.timeout(900)
def test_mypy_strict() -> None:
    result = _run(str(BIN / "mypy"))
    assert result.returncode == 0, result.stdout + result.stderr
