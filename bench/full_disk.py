"""A full data disk during a burst of tasks, as JSON on stdout: every job final within
seconds of space returning, no restart (docs/operations.md, "Full disks").

The real `dockyard server` (bench/serverproc.py) with its data dir — the SQLite store, the
job logs, the local agent's data dir — on a 64 MiB tmpfs. A commit of 100 tasks (each
prints a line and sleeps 25 s: they end while the disk is full); once all
run the tmpfs is filled to the last byte (the store's writes then fail: "database or disk
is full"), freed 30 s later.
Figures: seconds from freeing the space to the last run's final status
(`final_after_free_s`, the promise: within 10 s), the runs not final 120 s after it
(`non_final`, must be 0), their statuses, and what the server logged meanwhile (the store's
refusals, and "Task exception was never retrieved", which must be 0).

    .venv/bin/python bench/full_disk.py [--tasks 100] [--full-for 30]

Needs root (it mounts the tmpfs): elsewhere it prints why it is skipped and exits 0; under
CI=true it fails instead. The thresholds below which the server stops copying logs and the
agent takes no new jobs are set to 4 MiB (`--min-free-disk`, `--local-min-free-disk`): their
1 GiB defaults would refuse everything on a 64 MiB disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.local import stop_local_agent
from bench.serverproc import FINAL, Server, config_repo, job_rows, wait_for

SIZE_MIB = 64
TASK = "echo start; sleep 25"


def mount_tmpfs(path: Path) -> str | None:
    """Mount a 64 MiB tmpfs at `path`; None, or why it could not."""
    path.mkdir(parents=True, exist_ok=True)
    size = f"size={SIZE_MIB}m,mode=0755"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(path)], capture_output=True, text=True
    )
    return None if done.returncode == 0 else (done.stderr.strip() or "mount failed")


def fill(path: Path) -> Path:
    """Write a file into `path`'s filesystem until no byte is left."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (2**20, 4096, 1):
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                continue  # full at this size: smaller pieces for what is left
    finally:
        os.close(fd)
    return filler


def run_statuses(db: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        return [str(s) for (s,) in conn.execute("SELECT status FROM runs")]


def failures(db: Path) -> list[str]:
    """Why each failed job failed (its termination reason and message)."""
    import sqlite3

    query = "SELECT termination_reason, status_message FROM jobs WHERE status = 'failed'"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        return [f"{r}: {m}" for r, m in conn.execute(query)]


def run(mount: Path, work: Path, tasks: int, full_for: float) -> dict[str, Any]:
    names = [f"burst-{i}" for i in range(tasks)]
    tasks_files = dict.fromkeys(names, TASK)  # all at once: 10 MB, no CPU minimum, 64 MiB
    repo = config_repo(work / "repo", tasks_files, cpu="0", memory="10MB", disk="0.01GB")
    env = {"DOCKYARD_MIN_FREE_DISK": "4MiB", "DOCKYARD_LOCAL_MIN_FREE_DISK": "4MiB"}
    server = Server(mount / "data", repo, work, env=env)
    db = server.data_dir / "dockyard.db"
    filler: Path | None = None
    try:
        server.start()
        try:
            wait_for(lambda: run_statuses(db).count("running") == tasks, within=300, every=0.2)
        except TimeoutError:
            raise TimeoutError(f"the burst did not start: {Counter(run_statuses(db))}") from None
        filled = time.monotonic()
        filler = fill(mount)
        free_when_full = os.statvfs(mount).f_bavail
        at_fill = Counter(run_statuses(db))
        time.sleep(max(0.0, full_for - (time.monotonic() - filled)))  # the disk stays full
        at_free = Counter(run_statuses(db))
        filler.unlink()
        filler = None
        freed = time.monotonic()
        try:
            last = wait_for(lambda: all(s in FINAL for s in run_statuses(db)), within=120)
            final_after = round(last - freed, 3)
        except TimeoutError:
            final_after = None
        statuses = Counter(run_statuses(db))
        jobs = Counter(status for _, status, _ in job_rows(db))
        failed = failures(db)
    finally:
        if filler is not None:
            filler.unlink(missing_ok=True)
        server.kill()
        stop_local_agent(server.data_dir)
    text = server.log.read_text(errors="replace") if server.log else ""
    return {
        "tasks": tasks,
        "tmpfs_mib": SIZE_MIB,
        "full_for_s": full_for,
        "free_blocks_when_full": free_when_full,
        "final_after_free_s": final_after,
        "non_final": sum(n for s, n in statuses.items() if s not in FINAL),
        "runs": dict(statuses),
        "jobs": dict(jobs),
        "failed_jobs": failed,
        "runs_when_filled": dict(at_fill),
        "runs_when_freed": dict(at_free),
        "server_log": {
            "disk_full_errors": text.count("database or disk is full"),
            "task_exception_never_retrieved": text.count("Task exception was never retrieved"),
            "tracebacks": text.count("Traceback"),
        },
        "load_average": list(os.getloadavg()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--full-for", type=float, default=30.0)
    parser.add_argument("--server-log", type=Path, help="copy the server's output here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dockyard-full-disk-") as tmp:
        mount = Path(tmp) / "disk"
        why = mount_tmpfs(mount)
        if why is not None:
            message = f"full_disk: skipped: cannot mount a {SIZE_MIB} MiB tmpfs (needs root): {why}"
            print(json.dumps({"skipped": message}))
            return 1 if os.environ.get("CI") == "true" else 0
        try:
            figures = run(mount, Path(tmp), args.tasks, args.full_for)
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
            if args.server_log is not None and (Path(tmp) / "server.log").exists():
                shutil.copyfile(Path(tmp) / "server.log", args.server_log)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
