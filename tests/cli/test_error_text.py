"""An error the `dockyard` command prints quotes hostile text as text.

`reconciler.cli.main._print_error` prints every DockyardError; its message may quote a
file name or a resource name from a config repo (`reconciler.core.escaping`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_error_quoting_escapes_and_markup_prints_them_as_text(tmp_path: Path) -> None:
    name = "x\x1b]8;;https:evil.example\x1b\\[bold]y\x1b[2J.dstack.yml"
    bad = tmp_path / name
    bad.write_text("type: task\ncommands: [true]\nnope: 1\n")
    done = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli.main import run; run()", "validate", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    out = done.stdout + done.stderr
    assert "\x1b" not in out
    assert "\\x1b]8;;https:evil.example" in out
