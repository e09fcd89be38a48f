"""Reading a job's log by byte offset.

The log is one append-only file per job (``output.log``); an offset is a position in it,
so offsets are monotonic and a reader that lost a chunk asks again from where it was.
Bytes are returned as written: output that is not UTF-8 stays as it is.
"""

from __future__ import annotations

from pathlib import Path


def read_log(path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to ``limit`` bytes from ``offset``, and the offset to ask for next."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(limit)
    except FileNotFoundError:
        return b"", offset
    return data, offset + len(data)
