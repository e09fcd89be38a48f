"""The agent's data dir: one directory per job, the only state that survives a restart.

Layout under ``<data-dir>/jobs/<job-id>/``:

- ``job.json``: ``StoredJob`` (spec, last state, stop order), written atomically
  (temp file + rename) on every change;
- ``output.log``: stdout and stderr of the job, append-only; log offsets index it;
- ``work/``: the default working directory of a process job;
- executor files: ``pid.json`` and ``exit_code`` (process), ``log.cursor`` (docker).

The jobs dir and each job dir are ``0o711`` and files ``0o600`` (a spec holds secrets):
other users may reach a path they are given (a job's user its work dir), not list or read.

``JobStore`` only moves bytes; the job manager decides what to write.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.protocol import JobSpec, JobState


class StopOrder(BaseModel):
    """A stop in progress: persisted so a restarted agent finishes it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    requested_at: float
    deadline: float  # unix seconds after which the job gets SIGKILL
    killed: bool = False  # SIGKILL was sent


class StoredJob(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    spec: JobSpec
    state: JobState
    stop: StopOrder | None = None


@dataclass(frozen=True)
class JobFiles:
    """The paths of one job's files."""

    root: Path

    @property
    def record(self) -> Path:
        return self.root / "job.json"

    @property
    def log(self) -> Path:
        return self.root / "output.log"

    @property
    def work_dir(self) -> Path:
        return self.root / "work"

    @property
    def pid(self) -> Path:
        return self.root / "pid.json"

    @property
    def exit_code(self) -> Path:
        return self.root / "exit_code"

    @property
    def log_cursor(self) -> Path:
        return self.root / "log.cursor"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` so that readers see the old or the new file, never half.

    No fsync: this guards against the agent dying, which jobs survive. A host crash ends
    the jobs too, and a restarted agent then reports them ``lost``.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


class JobStore:
    """Job directories under ``<data_dir>/jobs``."""

    def __init__(self, data_dir: Path) -> None:
        self.jobs_dir = data_dir / "jobs"
        self.jobs_dir.mkdir(mode=0o711, parents=True, exist_ok=True)

    def files(self, job_id: str) -> JobFiles:
        return JobFiles(self.jobs_dir / job_id)

    def create(self, job: StoredJob) -> JobFiles:
        files = self.files(job.spec.id)
        files.root.mkdir(mode=0o711, parents=True, exist_ok=True)
        files.log.touch(mode=0o600)
        self.save(job)
        return files

    def save(self, job: StoredJob) -> None:
        write_atomically(self.files(job.spec.id).record, job.model_dump_json().encode())

    def load_all(self) -> tuple[list[StoredJob], list[str]]:
        """Every stored job, and the problems met (a torn or foreign directory)."""
        jobs, problems = [], []
        for root in sorted(self.jobs_dir.iterdir()):
            record = JobFiles(root).record
            if not record.is_file():
                continue
            try:
                jobs.append(StoredJob.model_validate_json(record.read_bytes()))
            except (OSError, ValidationError) as error:
                problems.append(f"{record}: {error}")
        return jobs, problems

    def delete(self, job_id: str) -> None:
        shutil.rmtree(self.files(job_id).root, ignore_errors=True)
