"""A TCP port reserved for one test while it runs: for a job that binds a port the test names.

`bind(("127.0.0.1", 0))` and closing the socket gives a port that is free at that moment
only: the kernel hands the same ephemeral range out to every other `bind(0)` and to the
local end of every outgoing connection (tests beside this one, the proxy's and the tunnel's
connections), so a job that binds the port seconds later, or again after a restart (a
rolling update stops the old replica and starts the new one on the same port), may find it
taken. A reserved port is taken below the ephemeral range, which the kernel never hands out
by itself, and is claimed with an `flock` on a file in the temp dir, held until the test
ends, so tests in other workers and other sessions on the machine never choose it too (the
lock goes with the process that held it). Called by tests whose jobs listen on a fixed port.
"""

from __future__ import annotations

import fcntl
import random
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CLAIMS = Path(tempfile.gettempdir()) / "dockyard-test-ports"
SPAN = 10_000  # how far below the ephemeral range ports are chosen


def ephemeral_low(table: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unreadable)."""
    try:
        return int(table.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextmanager
def reserved_port(claims: Path = CLAIMS, span: int = SPAN) -> Iterator[int]:
    """A free port below the ephemeral range, claimed for the block's duration."""
    claims.mkdir(mode=0o1777, exist_ok=True)
    high = ephemeral_low()
    for _ in range(500):
        port = random.randrange(max(1024, high - span), high)
        with (claims / f"{port}.lock").open("a") as claim:
            try:
                fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another test holds it
            if not bindable(port):
                continue  # something outside the tests listens there
            yield port
            return
    raise RuntimeError(f"no free port below {high} after 500 tries")
