"""Suite-wide collection order: the long files first.

`scripts/test.sh` runs the suite in pytest-xdist workers, one test file per worker at a
time (``--dist loadfile``), handing out files in collection order. A long file handed out
last is the run's tail, alone on one worker, so the static checks (`tests/test_quality.py`:
a cold mypy --strict takes minutes) and the files with `slow` tests are collected first.
The order inside each file is kept, and so is the order of everything else.

The suite also must not depend on how it was started: a shell starts a background job
(`nohup bash scripts/test.sh &`, many CI systems) with SIGINT and SIGQUIT ignored, and an
ignored disposition is inherited through fork and exec, so every child a test ends with
SIGINT (`dstack attach`, `ps -w`, ...) would ignore it. `pytest_configure` (run in every
xdist worker too) puts back the defaults before any test starts a child.
"""

from __future__ import annotations

import signal

import pytest

from tests.services.missing import MARKER, check_marks

QUALITY = "tests/test_quality.py"
_RESET_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP)


def pytest_configure(config: pytest.Config) -> None:
    """Default dispositions for the signals a caller may have left ignored (see above)."""
    for number in _RESET_SIGNALS:
        if signal.getsignal(number) == signal.SIG_IGN:
            default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
            signal.signal(number, default)
    config.addinivalue_line(
        "markers", f"{MARKER}(condition, what, how): see tests/services/missing.py"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `needs(...)` skips, or fails under CI=true, when what it needs is missing."""
    check_marks(item)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        if path == QUALITY:
            return 0
        return 1 if path in slow_files else 2

    items.sort(key=rank)  # stable: the order within a rank is the collected one
