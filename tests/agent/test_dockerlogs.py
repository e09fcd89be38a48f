"""Copying engine log frames to the job's log exactly once, across a restart (the frame
source stands in for the engine's log stream; the files are real)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from agent.server.executors.dockerlogs import (
    Cursor,
    LogFollower,
    load_cursor,
    parse_timestamp_ns,
    save_cursor,
)
from agent.server.store import JobFiles

BASE = parse_timestamp_ns("2026-11-30T07:00:00Z")


def test_timestamps() -> None:
    assert parse_timestamp_ns("1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert parse_timestamp_ns("2026-11-30T07:00:00.000000001Z") == BASE + 1
    assert parse_timestamp_ns("2026-11-30T07:00:00.0702976Z") == BASE + 70_297_600


def frames(entries: list[tuple[int, bytes]]) -> list[bytes]:
    """Frames as the engine sends them: ``<RFC 3339 nano timestamp> <bytes>``."""
    out = []
    for offset_ns, payload in entries:
        seconds, ns = divmod(BASE + offset_ns, 1_000_000_000)
        whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        out.append(f"{whole}.{ns:09d}Z ".encode() + payload)
    return out


def follow(files: JobFiles, stream: list[bytes]) -> list[int]:
    asked: list[int] = []

    def source(since_ns: int) -> Iterable[bytes]:
        asked.append(since_ns)
        return stream

    follower = LogFollower(files, source).start()
    assert follower.finished.wait(10) and follower.error is None
    return asked


def test_resume_after_a_crash_copies_every_frame_once(tmp_path: Path) -> None:
    files = JobFiles(tmp_path)
    files.log.touch()
    entries = [(1, b"one\n"), (2, b"long-"), (2, b"line-"), (2, b"end\n"), (3, b"\xff\xfe\n")]
    stream = frames(entries)
    # the previous agent copied four frames, saved its cursor after three, then died
    follow(files, stream[:4])
    save_cursor(files, Cursor(BASE + 2, 2, len(b"one\nlong-line-")))
    asked = follow(files, stream)
    assert asked == [BASE + 2]
    assert files.log.read_bytes() == b"one\nlong-line-end\n\xff\xfe\n"
    assert load_cursor(files) == Cursor(BASE + 3, 1, len(files.log.read_bytes()))


def test_a_fresh_follower_copies_everything(tmp_path: Path) -> None:
    files = JobFiles(tmp_path)
    files.log.touch()
    stream = frames([(5, b"a\n"), (5, b"b\n"), (6, b"c\n")])
    assert follow(files, stream) == [0]
    assert files.log.read_bytes() == b"a\nb\nc\n"


def test_a_stopped_follower_writes_nothing_more(tmp_path: Path) -> None:
    files = JobFiles(tmp_path)
    files.log.touch()
    follower = LogFollower(files, lambda since: frames([(1, b"late\n")]))
    follower.stop()
    follower.start()
    assert follower.finished.wait(10)
    assert files.log.read_bytes() == b""
