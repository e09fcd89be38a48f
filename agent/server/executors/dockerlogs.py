"""Copying a container's output into the job's log file, exactly once across restarts.

A ``LogFollower`` runs in a daemon thread: it streams the container's logs with
timestamps (``follow``) and appends each frame's bytes to ``output.log``. It saves a
cursor (``log.cursor``: the timestamp of the last frame copied, how many frames copied
carry that same timestamp, as the pieces of one long line do, and the log size after
them) every ``CURSOR_EVERY`` seconds. A follower started by a restarted agent first cuts
the log back to the cursor's size, then asks the engine for frames since the cursor's
timestamp and skips those the cursor covers: no frame is lost and none is written twice,
and the bytes after the cut are written again identically, so offsets stay valid.
Containers log with the ``local`` driver, which keeps bytes as they are (``json-file``
would replace bytes that are not UTF-8).

Used only for jobs that run an image's own program (see ``containers``). Limits, from the
engine: it stamps stdout and stderr separately, so a frame on one stream written in the
same instant as the cursor on the other may be skipped or copied twice after a restart;
and Docker 20.10 drops the newline that ends a line longer than 16 KiB.
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agent.server.store import JobFiles, write_atomically

log = logging.getLogger(__name__)

CURSOR_EVERY = 0.2


@dataclass(frozen=True)
class Cursor:
    timestamp_ns: int = 0
    same: int = 0  # frames copied with exactly this timestamp
    size: int = 0

    def after(self, stamp: int, length: int) -> Cursor:
        same = self.same + 1 if stamp == self.timestamp_ns else 1
        return Cursor(stamp, same, self.size + length)


def parse_timestamp_ns(text: str) -> int:
    """RFC 3339 UTC (``2026-11-30T06:59:00.0702976Z``) to nanoseconds since the epoch."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int((fraction + "000000000")[:9])


def split_frame(frame: bytes) -> tuple[int, bytes]:
    """A timestamped log frame as (nanoseconds, payload)."""
    stamp, _, payload = frame.partition(b" ")
    return parse_timestamp_ns(stamp.decode("ascii")), payload


def load_cursor(files: JobFiles) -> Cursor:
    try:
        data = json.loads(files.log_cursor.read_text())
        return Cursor(int(data["timestamp_ns"]), int(data["same"]), int(data["size"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Cursor()


def save_cursor(files: JobFiles, cursor: Cursor) -> None:
    data = {"timestamp_ns": cursor.timestamp_ns, "same": cursor.same, "size": cursor.size}
    write_atomically(files.log_cursor, json.dumps(data).encode())


def rewind_log(files: JobFiles) -> Cursor:
    """Cut the log back to the saved cursor (bytes after it will be copied again)."""
    cursor = load_cursor(files)
    with open(files.log, "ab") as log:
        if log.tell() > cursor.size:
            log.truncate(cursor.size)
        elif log.tell() < cursor.size:  # the log lost bytes: trust the file, not the cursor
            cursor = Cursor(cursor.timestamp_ns, cursor.same, log.tell())
    return cursor


FrameSource = Callable[[int], Iterable[bytes]]  # since (ns) -> timestamped frames


class LogFollower:
    """Copies frames from ``source`` to the job's log in a daemon thread."""

    def __init__(self, files: JobFiles, source: FrameSource) -> None:
        self._files = files
        self._source = source
        self._stopped = threading.Event()
        self.finished = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="log-follower")

    def start(self) -> LogFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Write nothing more (the thread ends at its next frame or at the stream's end)."""
        self._stopped.set()

    def _run(self) -> None:
        try:
            self._copy(rewind_log(self._files))
        except Exception as error:  # the outermost loop of this thread: report, never raise
            log.exception("copying the log of %s failed", self._files.root.name)
            self.error = error
        finally:
            self.finished.set()

    def _copy(self, cursor: Cursor) -> None:
        saved_at = time.monotonic()
        skip_before, skip_same = cursor.timestamp_ns, cursor.same
        fd = os.open(self._files.log, os.O_WRONLY | os.O_APPEND)
        try:
            for frame in self._source(cursor.timestamp_ns):
                if self._stopped.is_set():
                    return
                stamp, payload = split_frame(frame)
                if stamp < skip_before or (stamp == skip_before and skip_same > 0):
                    skip_same -= stamp == skip_before
                    continue  # copied before the restart
                skip_before = -1  # from the first new frame on, everything is new
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                cursor = cursor.after(stamp, len(payload))
                if time.monotonic() - saved_at > CURSOR_EVERY:
                    save_cursor(self._files, cursor)
                    saved_at = time.monotonic()
            if not self._stopped.is_set():
                save_cursor(self._files, cursor)
        finally:
            os.close(fd)
