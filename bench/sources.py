"""Many sources on one server (issue 28), as JSON on stdout.

Starts the real `dockyard server` (bench/serverproc.py, SQLite, the local fleet, jobs as
processes) twice, one after the other, with the same total work:

- ``many``: a sources file of N sources, each its own git repo and project with C task
  configs;
- ``one``: one source whose repo holds all N x C configs.

Each waits until its initial runs are done, then measures the server's CPU over a quiet
window (``idle_cpu_ms_per_s``: what following N sources costs while nothing happens),
then sends P pushes, one every ``--every`` seconds, round robin over its sources: each a
commit adding one task config to a source's repo and a signed GitHub push webhook for
that repository. For each push it records the time from the webhook's POST until the new
run's job is running (or past it), read from the server's store beside it; and the
server process's CPU (/proc utime + stime) over the push window, per push. Both figures
are printed for each scenario and side by side as ratios many/one: the per-source cost
must not grow with the number of sources (goal: ratios near 1).

    .venv/bin/python bench/sources.py [--sources 50] [--configs 20] [--pushes 100]
        [--every 0.5] [--idle 10]

The load average is printed before and after each scenario: on a shared machine wall time
is the machine's; CPU per push moves far less with load.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.local import stop_local_agent
from bench.restart_progress import cpu_seconds
from bench.serverproc import FINAL, Server, end_jobs, percentiles, wait_for

SECRET = "bench-sources-webhook-secret"
TASK = "type: task\nname: {name}\ncommands: ['true']\nresources:\n  cpu: 1..\n  memory: 0.1GB..\n"
STARTED = ("running", "terminating", *FINAL)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def _repo(path: Path, names: list[str]) -> Path:
    path.mkdir(parents=True)
    for name in names:
        (path / f"{name}.dstack.yml").write_text(TASK.format(name=name))
    _git(path, "init", "-q", "-b", "main")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "configs")
    return path


def _sources_file(path: Path, repos: list[Path]) -> Path:
    lines = ["sources:"]
    for index, repo in enumerate(repos):
        lines += [
            f"  - name: team{index}",
            f"    repo: {repo}",
            f"    project: team{index}",
            "    webhook_secret: env:BENCH_SOURCES_SECRET",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _push(port: int, repo: Path) -> tuple[int, str]:
    body = json.dumps(
        {"ref": "refs/heads/main", "after": "1" * 40, "repository": {"clone_url": str(repo)}}
    ).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/webhooks/github",
        data=body,
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": signature,
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(answer.status), str(json.loads(answer.read()).get("outcome"))


def _job_states(db: Path) -> dict[str, str]:
    """run name -> the furthest status of its newest job, across every project."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        rows = conn.execute(
            "SELECT r.run_name, j.status FROM jobs j JOIN runs r ON r.id = j.run_id"
        ).fetchall()
    return {str(name): str(status) for name, status in rows}


def _scenario(tmp: Path, sources: int, configs: int, args: argparse.Namespace) -> dict[str, Any]:
    names = [[f"s{s}-c{c}" for c in range(configs)] for s in range(sources)]
    repos = [_repo(tmp / f"repo{s}", names[s]) for s in range(sources)]
    server = Server(
        data_dir=tmp / "data",
        repo=None,
        work=tmp,
        env={
            "DOCKYARD_SOURCES_CONFIG": str(_sources_file(tmp / "sources.yml", repos)),
            "BENCH_SOURCES_SECRET": SECRET,
            "DOCKYARD_FETCH_INTERVAL": "3600",
        },
    )
    db = tmp / "data" / "dockyard.db"
    load_before = os.getloadavg()
    try:
        started = server.start()
        everything = {n for group in names for n in group}

        def initial_done() -> bool:
            states = _job_states(db) if db.exists() else {}
            return all(states.get(n) in FINAL for n in everything)

        synced = wait_for(initial_done, within=args.timeout, every=0.2)
        assert server.process is not None
        pid = server.process.pid
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(args.idle)  # the quiet window measured, not a wait for something
        idle = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)

        sent: dict[str, float] = {}
        took: dict[str, float] = {}
        outcomes: dict[str, int] = {}
        cpu_start = cpu_seconds(pid)
        next_at = time.monotonic()
        for index in range(args.pushes):
            source = index % sources
            name = f"push{index}"
            (repos[source] / f"{name}.dstack.yml").write_text(TASK.format(name=name))
            _git(repos[source], "add", "-A")
            _git(repos[source], "commit", "-q", "-m", name)
            sent[name] = time.monotonic()
            status, outcome = _push(server.port, repos[source])
            outcomes[f"{status} {outcome}"] = outcomes.get(f"{status} {outcome}", 0) + 1
            _record(db, sent, took)
            next_at += args.every
            while time.monotonic() < next_at:
                _record(db, sent, took)
                time.sleep(0.02)

        def all_started() -> bool:
            _record(db, sent, took)
            return len(took) == len(sent)

        wait_for(all_started, within=args.timeout, every=0.02)
        push_cpu = cpu_seconds(pid) - cpu_start
        failed = sum(1 for s in _job_states(db).values() if s in ("failed", "aborted"))
    finally:
        if server.process is not None and server.process.poll() is None:
            server.stop()
        stop_local_agent(server.data_dir)  # it outlives its server, by design
        end_jobs(server.data_dir)
    return {
        "sources": sources,
        "configs_per_source": configs,
        "initial_sync_s": round(synced - started, 1),
        "idle_server_cpu_ms_per_s": round(idle * 1000, 1),
        "pushes": args.pushes,
        "webhook_answers": outcomes,
        "webhook_to_running_s": percentiles(list(took.values())),
        "server_cpu_ms_per_push": round(push_cpu * 1000 / args.pushes, 1),
        "failed_jobs": failed,
        "load_before": [round(x, 1) for x in load_before],
        "load_after": [round(x, 1) for x in os.getloadavg()],
    }


def _record(db: Path, sent: dict[str, float], took: dict[str, float]) -> None:
    waiting = [n for n in sent if n not in took]
    if not waiting:
        return
    now = time.monotonic()
    states = _job_states(db)
    for name in waiting:
        if states.get(name) in STARTED:
            took[name] = now - sent[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=50)
    parser.add_argument("--configs", type=int, default=20)
    parser.add_argument("--pushes", type=int, default=100)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between pushes")
    parser.add_argument("--idle", type=float, default=10.0, help="quiet window, seconds")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    total = args.sources * args.configs
    with tempfile.TemporaryDirectory(prefix="bench-sources-") as one_dir:
        one = _scenario(Path(one_dir), 1, total, args)
    with tempfile.TemporaryDirectory(prefix="bench-sources-") as many_dir:
        many = _scenario(Path(many_dir), args.sources, args.configs, args)
    p50 = many["webhook_to_running_s"].get("p50"), one["webhook_to_running_s"].get("p50")
    print(
        json.dumps(
            {
                "one_source": one,
                "many_sources": many,
                "ratio_many_over_one": {
                    "webhook_to_running_p50": round(p50[0] / p50[1], 2)
                    if p50[0] and p50[1]
                    else None,
                    "server_cpu_per_push": round(
                        many["server_cpu_ms_per_push"] / max(one["server_cpu_ms_per_push"], 0.1),
                        2,
                    ),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
