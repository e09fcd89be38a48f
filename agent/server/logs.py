"""Reading a job's log by byte offset.

The log is one append-only file per job (``output.log``); an offset is a position in it,
so offsets are monotonic and a reader that lost a chunk asks again from where it was.
Bytes are returned as written: output that is not UTF-8 stays as it is. Once the server says
it has stored a prefix of the log (``ack``), ``release_log`` gives that prefix's disk blocks
back, so a long-running chatty job costs its host only what the server has not copied yet.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import cast


def read_log(path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to ``limit`` bytes from ``offset``, and the offset to ask for next."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(limit)
    except FileNotFoundError:
        return b"", offset
    return data, offset + len(data)


_KEEP_SIZE, _PUNCH_HOLE = 0x01, 0x02  # fallocate(2) flags
_BLOCK = 4096


def _fallocate() -> Callable[[int, int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.fallocate
    except (OSError, AttributeError):  # not Linux
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    call.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], call)


def release_log(path: Path, upto: int) -> int:
    """Give the disk blocks of bytes ``[0, upto)`` back (the server has stored them).

    The file keeps its size, so offsets stay valid; the released range reads as NUL bytes.
    Returns the bytes released (``upto`` rounded down to 4 KiB), 0 where the filesystem
    cannot punch holes (the log then simply keeps its blocks).
    """
    length = upto // _BLOCK * _BLOCK
    fallocate = _fallocate()
    if length <= 0 or fallocate is None:
        return 0
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return 0
    try:
        done = fallocate(fd, _KEEP_SIZE | _PUNCH_HOLE, 0, length)
    finally:
        os.close(fd)
    return length if done == 0 else 0
