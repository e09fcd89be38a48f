"""Suite-wide collection order: the long files first.

`scripts/test.sh` runs the suite in pytest-xdist workers, one test file per worker at a
time (``--dist loadfile``), handing out files in collection order. A long file handed out
last is the run's tail, alone on one worker, so the static checks (`tests/test_quality.py`:
a cold mypy --strict takes minutes) and the files with `slow` tests are collected first.
The order inside each file is kept, and so is the order of everything else.
"""

from __future__ import annotations

import pytest

QUALITY = "tests/test_quality.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        if path == QUALITY:
            return 0
        return 1 if path in slow_files else 2

    items.sort(key=rank)  # stable: the order within a rank is the collected one
