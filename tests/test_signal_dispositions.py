"""The suite does not depend on the signal dispositions of whoever started it.

A non-interactive shell starts a background job (`nohup bash scripts/test.sh &`) with SIGINT
ignored, and children inherit an ignored disposition, so a test that ends a child with
SIGINT (`dstack attach`, `ps -w`) would wait forever. tests/conftest.py's `pytest_configure`
puts the defaults back. Here an inner pytest is started with SIGINT ignored, on a test that
interrupts a child Python: with our conftest it passes; with an empty conftest (the control,
which shows the start really ignores SIGINT) the child ignores the interrupt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INNER = """
import signal
import subprocess
import sys


def test_a_child_ends_on_sigint():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout.readline() == b"ready\\n"
        child.send_signal(signal.SIGINT)
        # an uncaught KeyboardInterrupt ends Python by SIGINT at once; an ignored SIGINT
        # leaves it sleeping (the wait raises TimeoutExpired)
        assert child.wait(timeout=15) == -signal.SIGINT
    finally:
        child.kill()
        child.wait()
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _inner_pytest(folder: Path, conftest: str) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    (folder / "conftest.py").write_text(conftest)
    (folder / "test_inner.py").write_text(INNER)
    # no plugin autoload: the inner run needs none, and one of the installed plugins' imports
    # (grpc's event engine) once aborted the control run at exit (SIGABRT after its summary)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        cwd=folder,
        env=env,
        preexec_fn=_ignore_sigint,  # as a shell starts a background job
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_child_ends_on_sigint_when_the_suite_was_started_with_sigint_ignored(
    tmp_path: Path,
) -> None:
    ours = _inner_pytest(tmp_path / "ours", "from tests.conftest import pytest_configure\n")
    assert ours.returncode == 0 and "1 passed" in ours.stdout, ours.stdout + ours.stderr
    control = _inner_pytest(tmp_path / "control", "")
    assert "1 failed" in control.stdout, control.stdout + control.stderr
    assert "TimeoutExpired" in control.stdout, control.stdout
