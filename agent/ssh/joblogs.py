"""Jobs' logs for dstack's attached log stream, kept readable after the job is removed.

The control plane removes a job from the agent as soon as it has stored its end (and its
log), often within a second of the job's exit; dstack's client attaches when it sees the
run running or done, so for a short job it asks for the log of a job the agent no longer
has. `KeptLogs` holds an open descriptor on each job's ``output.log`` from the moment the
job ends (it follows the job manager's event feed) or someone attaches to it, so a removed
job's log stays readable (the file's directory may be gone: the descriptor keeps the
bytes) for `keep_seconds`, at most `limit` jobs. Used by `agent.ssh.service.job_access`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.ssh.jump import JobLink


@dataclass
class _Kept:
    link: JobLink
    run_name: str
    fd: int
    since: float
    ended_at: float | None = None  # the job's end (unix seconds), if it had ended


class KeptLogs:
    """Open log descriptors of ended or attached jobs (see the module docstring)."""

    def __init__(
        self,
        *,
        keep_seconds: float = 600.0,
        limit: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keep_seconds = keep_seconds
        self._limit = limit
        self._clock = clock
        self._kept: dict[str, _Kept] = {}  # oldest `since` first: prunes stop early

    def keep(self, link: JobLink, run_name: str, log: Path, ended_at: float | None = None) -> None:
        """Hold `log` open for the job of `link` (once; missing files are skipped), with
        the job's end time if it has ended."""
        self.prune()
        if link.job_id in self._kept:
            kept = self._kept.pop(link.job_id)  # kept again: now the newest
            kept.since, kept.ended_at = self._clock(), ended_at or kept.ended_at
            self._kept[link.job_id] = kept
            return
        try:
            fd = os.open(log, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        self._kept[link.job_id] = _Kept(link, run_name, fd, self._clock(), ended_at)
        while len(self._kept) > self._limit:
            self._drop(next(iter(self._kept)))  # the oldest

    def find(self, name: str, projects: frozenset[str] | None = None) -> JobLink | None:
        """A kept job by id, else the most recently kept job of run `name` (with
        `projects`, only jobs of those projects)."""
        self.prune()
        mine = [k for k in self._kept.values() if projects is None or k.link.project in projects]
        for kept in mine:
            if kept.link.job_id == name:
                return kept.link
        runs = [k for k in mine if k.run_name == name]
        return max(runs, key=lambda k: k.since).link if runs else None

    def ended_at(self, job_id: str) -> float | None:
        """The end time of a kept job (None: not kept, or kept while it ran)."""
        kept = self._kept.get(job_id)
        return kept.ended_at if kept is not None else None

    def read(self, job_id: str, offset: int, limit: int) -> bytes | None:
        """Up to `limit` bytes of a kept log from `offset` (None: not kept)."""
        kept = self._kept.get(job_id)
        if kept is None:
            return None
        try:
            return os.pread(kept.fd, limit, offset)
        except OSError:  # dropped meanwhile
            return None

    def prune(self) -> None:
        """Drop what was kept longer than `keep_seconds` (called on each keep and find:
        it looks at the oldest only, until one is still young)."""
        now = self._clock()
        while self._kept:
            oldest = next(iter(self._kept.values()))
            if now - oldest.since <= self._keep_seconds:
                return
            self._drop(oldest.link.job_id)

    def close(self) -> None:
        for job_id in list(self._kept):
            self._drop(job_id)

    def _drop(self, job_id: str) -> None:
        kept = self._kept.pop(job_id, None)
        if kept is not None:
            with contextlib.suppress(OSError):
                os.close(kept.fd)
