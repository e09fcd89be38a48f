"""What a test does when something it needs is missing on this machine: the one helper.

Outside CI the test is skipped with the reason (a developer's machine may lack Docker,
PostgreSQL, an ssh client or root); under `CI=true` it fails with the same reason, because a
CI run that silently skips the real-part tests would pass while checking nothing
(`scripts/test.sh` runs `scripts/setup.sh --dev`, which installs all of it). Every skip in
tests/ goes through here: `need` in a test or fixture body, `needs` as a decorator (checked
by tests/conftest.py's `pytest_runtest_setup`), `need_module` for an optional import.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

MARKER = "needs"
DEV_EXTRA = "pip install -e '.[dev]' (scripts/setup.sh --dev installs it)"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test with `reason`, or fail it with `reason` under CI=true."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: a missing real part fails the run)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def need(condition: bool, what: str, how: str) -> None:
    """Go on if `condition`, else skip (fail under CI) naming `what` and `how` to get it."""
    if not condition:
        skip_or_fail(f"needs {what}: {how}")


def needs(condition: bool, what: str, how: str) -> pytest.MarkDecorator:
    """`need` as a test or module mark, checked when each test is set up (not collected)."""
    return pytest.mark.needs(condition=condition, what=what, how=how)


def check_marks(item: pytest.Item) -> None:
    """Apply every `needs` mark of `item` (called from tests/conftest.py)."""
    for mark in item.iter_markers(MARKER):
        need(bool(mark.kwargs["condition"]), str(mark.kwargs["what"]), str(mark.kwargs["how"]))


def need_module(name: str, how: str = DEV_EXTRA) -> ModuleType:
    """Import `name`, or skip (fail under CI) saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        skip_or_fail(f"needs the Python module {name} ({exc}): {how}")


def needs_ssh_client() -> pytest.MarkDecorator:
    """The mark of a test that runs OpenSSH's `ssh` (dstack attach, the tunnel, the jump host)."""
    return needs(
        shutil.which("ssh") is not None,
        "OpenSSH's client (ssh)",
        "apt-get install openssh-client (scripts/setup.sh --dev installs it)",
    )


def needs_root(why: str) -> pytest.MarkDecorator:
    """The mark of a test that acts as another local user (`why`), which needs root."""
    return needs(os.geteuid() == 0, f"root ({why})", "run the tests as root, as CI does")
