"""A small tmpfs filesystem a test can fill: `mount -t tmpfs -o size=…` (tests run as root).

Outside CI a machine where mounting is not allowed skips the test; under CI=true it fails,
like the other fixtures of real parts.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.services.missing import skip_or_fail


@contextmanager
def tmpfs(path: Path, size_mib: int) -> Iterator[Path]:
    """`path` as a tmpfs of `size_mib` MiB for the block's duration."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        message = f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}"
        skip_or_fail(message)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(path: Path, leave_mib: float) -> Path:
    """Write a file into `path`'s filesystem until `leave_mib` MiB are left free."""
    filler = path / "filler"
    stat = os.statvfs(path)
    free = stat.f_bavail * stat.f_frsize
    size = max(0, free - int(leave_mib * 2**20))
    with filler.open("wb") as handle:
        handle.write(b"\0" * size)
    return filler
