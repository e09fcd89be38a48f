"""A library's warnings never reach the terminal; ours do; a user's -W wins.

asyncssh with cryptography 51 prints five ``CryptographyDeprecationWarning: DSA is
deprecated`` lines when it is imported, which buried every command's output
(``agent.librarywarnings``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys, warnings
from agent.librarywarnings import show_only_our_warnings
show_only_our_warnings()
import asyncssh  # warns from asyncssh.crypto (cryptography >= 48)
warnings.warn("from a library", DeprecationWarning)  # issued from __main__: not ours
warnings.warn_explicit("from our code", UserWarning, "reconciler/x.py", 1, module="reconciler.x")
"""


def _stderr(*flags: str) -> str:
    done = subprocess.run(
        [sys.executable, *flags, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return done.stderr


def test_library_warnings_are_hidden_and_ours_shown() -> None:
    err = _stderr()
    assert "from our code" in err
    assert "DSA" not in err and "Deprecat" not in err


def test_a_user_who_asks_for_warnings_gets_them() -> None:
    assert "from a library" in _stderr("-W", "default")


def test_asyncssh_does_warn_without_the_filter() -> None:
    """The case the filter exists for is real with the locked libraries (else this file
    proves nothing): the same probe with the filter disabled shows the DSA lines."""
    done = subprocess.run(
        [sys.executable, "-c", "import asyncssh"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert "DSA is deprecated" in done.stderr


def test_the_agent_prints_no_library_warning(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stderr == ""
