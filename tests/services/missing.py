"""What a fixture of a real part does when that part is missing on this machine.

Outside CI the test is skipped with the reason (a developer's machine may lack Docker or
PostgreSQL); under `CI=true` it fails with the same reason, because a CI run that silently
skips the real-part tests would pass while checking nothing. Called by the PostgreSQL,
Docker and sshd fixtures in this package.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test with `reason`, or fail it with `reason` under CI=true."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: a missing real part fails the run)", pytrace=False)
    pytest.skip(reason)
