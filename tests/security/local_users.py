"""A second local account for attack tests: created with `useradd` when missing.

Tests of trust boundaries act as another user of the host, as an attacker with a shell
account would. Creating accounts needs root (the tests run as root here and in CI): other
runs skip, and fail under CI=true, where the check must not silently vanish.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import subprocess
from pathlib import Path

from tests.services.missing import skip_or_fail

PROBE_USER = "dockyard-probe"
# The system's interpreter: the test's may live under a home other users cannot enter.
SYSTEM_PYTHON = Path("/usr/bin/python3")


def need_root() -> None:
    """Skip (fail under CI) unless the test may switch users and use /usr/bin/python3."""
    problem = None
    if os.geteuid() != 0:
        problem = "acting as another local user needs root"
    elif not SYSTEM_PYTHON.exists():
        problem = "no /usr/bin/python3 for the other user"
    if problem is not None:
        skip_or_fail(problem)


def probe_uid() -> int:
    """The uid of the attacker's account, created (no home, no login shell) if missing."""
    need_root()
    try:
        return pwd.getpwnam(PROBE_USER).pw_uid
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PROBE_USER],
        check=False,
        capture_output=True,
    )
    return pwd.getpwnam(PROBE_USER).pw_uid


async def run_as(uid: int, script: str, *args: str) -> str:
    """Run a stdlib-only Python `script` as `uid`; its stdout (it must exit 0)."""
    process = await asyncio.create_subprocess_exec(
        str(SYSTEM_PYTHON),
        "-c",
        script,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        user=uid,
        group=pwd.getpwuid(uid).pw_gid,
        extra_groups=[],
        cwd="/",
    )
    async with asyncio.timeout(30):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()
