"""The server's copy of each job's log: one file per job, written at known byte offsets.

The jobs worker pulls chunks from the agent by offset and writes each chunk at the
offset the job row records (`jobs.log_offset`), truncating anything past it first, so a
crash between the write and the row update never duplicates bytes. The logs API and
`dockyard logs` read the same files. Layout:
`<data_dir>/projects/<project>/logs/<run_name>/<job_id>.log`.
"""

from __future__ import annotations

import os
from pathlib import Path


def job_log_path(data_dir: Path, project: str, run_name: str, job_id: str) -> Path:
    return data_dir / "projects" / project / "logs" / run_name / f"{job_id}.log"


def write_chunk(path: Path, offset: int, data: bytes) -> int:
    """Write `data` at byte `offset` (dropping anything after it); return the new end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)
    return offset + len(data)


def read_chunk(path: Path, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes from `offset`; empty when the file is missing or shorter."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except FileNotFoundError:
        return b""
