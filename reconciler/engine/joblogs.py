"""The server's copy of each job's log: its head and its tail, written at known byte offsets.

The jobs worker pulls chunks from the agent by offset and writes each chunk at the
offset the job row records (`jobs.log_offset`), truncating anything past it first, so a
crash between the write and the row update never duplicates bytes. Offsets are the agent's
byte offsets into the whole output. The logs API and `dockyard logs` read the same files.

A log is capped (`LogCap`, the `job_log_head`/`job_log_tail` settings): bytes
`[0, head)` go to `<job_id>.log`; later bytes go to `<job_id>.tail`, whose first line is the
offset its data starts at. When the tail file holds more than twice `tail` bytes, it is
rewritten (atomically) to its last `tail` bytes, so a job's copy never exceeds
`head + 2 * tail` on disk and the middle is dropped. `read_log` says how many bytes were
dropped between what it returns. Layout: `<data_dir>/projects/<project>/logs/<run_name>/`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TAIL_SUFFIX = ".tail"
_HEADER_BYTES = 21  # the tail's start offset: 20 digits and a newline


@dataclass(frozen=True, slots=True)
class LogCap:
    """Bytes kept of each job's log: the first `head` and (at least) the last `tail`."""

    head: int
    tail: int


@dataclass(frozen=True, slots=True)
class LogSlice:
    """What `read_log` found: `data` starts at `offset + dropped`, ends at `next_offset`."""

    data: bytes
    next_offset: int
    dropped: int


def job_log_path(data_dir: Path, project: str, run_name: str, job_id: str) -> Path:
    return data_dir / "projects" / project / "logs" / run_name / f"{job_id}.log"


def tail_path(path: Path) -> Path:
    return path.with_suffix(TAIL_SUFFIX)


def _write_at(path: Path, position: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, position)
        os.lseek(fd, position, os.SEEK_SET)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def _tail_start(path: Path) -> int | None:
    try:
        with path.open("rb") as handle:
            header = handle.read(_HEADER_BYTES)
    except FileNotFoundError:
        return None
    return int(header) if len(header) == _HEADER_BYTES and header.strip().isdigit() else None


def _replace_tail(path: Path, start: int, data: bytes) -> None:
    scratch = path.with_suffix(".tail-new")
    _write_at(scratch, 0, b"%020d\n" % start + data)
    os.replace(scratch, path)


def _write_tail(path: Path, offset: int, data: bytes, keep: int) -> None:
    start = _tail_start(path)
    if start is None or offset < start:
        _replace_tail(path, offset, data)
        start = offset
    else:
        _write_at(path, _HEADER_BYTES + offset - start, data)
    held = offset - start + len(data)
    if held > 2 * keep:
        with path.open("rb") as handle:
            handle.seek(_HEADER_BYTES + held - keep)
            last = handle.read(keep)
        _replace_tail(path, start + held - keep, last)


def write_chunk(path: Path, offset: int, data: bytes, cap: LogCap | None = None) -> int:
    """Write `data` at byte `offset` (dropping anything after it); return the new end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    end = offset + len(data)
    if cap is None:
        _write_at(path, offset, data)
        return end
    if offset < cap.head:
        head_part = data[: cap.head - offset]
        _write_at(path, offset, head_part)
        if end <= cap.head:
            tail_path(path).unlink(missing_ok=True)
            return end
        data, offset = data[len(head_part) :], cap.head
    _write_tail(tail_path(path), offset, data, cap.tail)
    return end


def read_chunk(path: Path, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes of the head file from `offset`; empty when missing or shorter."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except FileNotFoundError:
        return b""


def read_log(path: Path, offset: int, limit: int) -> LogSlice:
    """Up to `limit` bytes from `offset`, skipping (and counting) what the cap dropped."""
    data = read_chunk(path, offset, limit)
    if data:
        return LogSlice(data, offset + len(data), 0)
    tail = tail_path(path)
    start = _tail_start(tail)
    if start is None:
        return LogSlice(b"", offset, 0)
    dropped = max(0, start - offset)
    position = offset + dropped
    try:
        with tail.open("rb") as handle:
            handle.seek(_HEADER_BYTES + position - start)
            data = handle.read(limit)
    except FileNotFoundError:  # replaced or deleted meanwhile: the caller asks again
        return LogSlice(b"", offset, 0)
    return LogSlice(data, position + len(data), dropped if data else 0)


def dropped_notice(dropped: int) -> bytes:
    """The line `dockyard logs` and the logs API put where the cap dropped bytes."""
    return (
        f"\n[dockyard: {dropped} bytes of this log were dropped here; the server keeps "
        "the first job_log_head and the last job_log_tail bytes]\n"
    ).encode()
