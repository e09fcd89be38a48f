"""Progress after a graceful restart of `dockyard server`, as JSON on stdout.

N tasks on the local fleet print a line every 0.2 s; the server is stopped with SIGTERM
(graceful) and started again, R times. For each restart: the seconds from the new
process's start until the first job progresses (the store records more of its log than it
had when the server stopped; watched from the spawn on, as the runtime starts before the
web app) and the CPU time the new process used until then (what load does not stretch),
the same from the new server answering its healthcheck (negative when jobs moved before
it answered) and from the SIGTERM, until every job has, and how long the graceful
stop took; p50/min/max over the restarts. The promise (docs/server.md, "Stopping"):
progress resumes within 2 s of a graceful restart's new process.

    .venv/bin/python bench/restart_progress.py [--tasks 10] [--restarts 5]

The real server process (bench/serverproc.py), SQLite in a temp dir, jobs as processes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.local import stop_local_agent
from bench.serverproc import Server, config_repo, end_jobs, job_rows, percentiles, wait_for

TICKS = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"


def offsets(db: Path) -> dict[str, int]:
    return {name: offset for name, status, offset in job_rows(db) if status == "running"}


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process `pid` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(tmp: Path, tasks: int, restarts: int) -> dict[str, Any]:
    names = [f"tick-{i}" for i in range(tasks)]
    repo = config_repo(tmp / "repo", dict.fromkeys(names, TICKS))
    server = Server(tmp / "data", repo, tmp)
    db = server.data_dir / "dockyard.db"
    first: list[float] = []
    every: list[float] = []
    from_spawn: list[float] = []
    from_sigterm: list[float] = []
    stops: list[float] = []
    cpu: list[float] = []  # the new server's CPU seconds until the first job moved
    try:
        server.start()
        wait_for(lambda: sum(o > 0 for o in offsets(db).values()) == tasks, within=300)
        for _ in range(restarts):
            time.sleep(1.0)  # a steady state: every job's log followed
            stopping = time.monotonic()
            code = server.stop()
            if code != 0:
                raise RuntimeError(f"the graceful stop exited {code}; see {server.log}")
            stopped = time.monotonic()
            stops.append(stopped - stopping)
            at_stop = offsets(db)

            def moved(at_stop: dict[str, int] = at_stop) -> list[str]:
                now = offsets(db)
                return [n for n, o in at_stop.items() if now.get(n, 0) > o]

            # watched from the spawn on: the server may move jobs before it answers
            def watch() -> tuple[float, float]:
                at = wait_for(lambda: bool(moved()), within=120, every=0.01)
                assert server.process is not None
                return at, cpu_seconds(server.process.pid)

            with ThreadPoolExecutor(1) as pool:
                watching = pool.submit(watch)
                up = server.start()
                some, used = watching.result()
            cpu.append(used)
            first.append(some - up)
            from_spawn.append(some - stopped)
            from_sigterm.append(some - stopping)
            wanted = set(at_stop)
            every.append(wait_for(lambda w=wanted: not w - set(moved()), within=120) - up)
    finally:
        server.kill()
        stop_local_agent(server.data_dir)
        end_jobs(server.data_dir)
    return {
        "tasks": tasks,
        "restarts": restarts,
        "first_job_progress_after_healthy_s": percentiles(first),
        "every_job_progress_after_healthy_s": percentiles(every),
        "first_job_progress_after_process_start_s": percentiles(from_spawn),
        "first_job_progress_after_sigterm_s": percentiles(from_sigterm),
        "server_cpu_s_to_first_job_progress": percentiles(cpu),
        "graceful_stop_s": percentiles(stops),
        "samples_first_s": [round(s, 3) for s in first],
        "load_average": list(os.getloadavg()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dockyard-restart-") as tmp:
        figures = run(Path(tmp), args.tasks, args.restarts)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
