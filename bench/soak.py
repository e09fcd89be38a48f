"""A soak: `dockyard server` for a set time with a chatty service and a task every few seconds.

Starts the real server (its own process, SQLite, the local agent) with day-two settings scaled
to the run's length, applies a service that prints `--lines` lines per second (and serves
HTTP), and re-applies a short task every `--task-every` seconds (a changed command each time,
so each is a new run). Every `--sample` seconds it records the server process's memory (RSS)
and open files, the database's size (with its WAL) and the data dir's size — the server's
copy of logs and state, and the local agent's dir (its own job output) apart, then both
together. Prints JSON: the settings it used, the machine's load average, the samples, and per
figure its growth over the second half of the run: the last quarter against the third (the
first half is the warm-up; goal: under 5%). Sizes and memory compare the quarters' means
(a log tail compacted now and then saws: sample often, `--sample 5`, so each quarter holds
many teeth); open files compare their medians (25 descriptors: one that comes and goes is 4%,
so one transient descriptor must not decide), with each quarter's range beside it.

    python bench/soak.py [--minutes 10] [--lines 1000] [--task-every 5] [--sample 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.local import stop_local_agent  # noqa: E402

SERVICE = """type: service
name: chatty
port: {port}
auth: false
commands:
  - (python3 -m http.server {port} >/dev/null 2>&1 &)
  - python3 -u -c "exec('{loop}')"
"""
LOOP = (  # one line for the shell: the newlines are Python escapes inside exec's string
    r"import time\nn = 0\nwhile True:\n"
    r"    start = time.time()\n"
    r"    for _ in range({per_tick}):\n"
    r"        n += 1; print(f\"request {{n}} GET /v1/completions 200 12ms tokens=57\")\n"
    r"    time.sleep(max(0.0, 0.1 - (time.time() - start)))"
)
TASK = "type: task\nname: tick\ncommands:\n  - echo tick {n}\n"
SETTINGS = {  # day-two settings scaled down so a short soak reaches its steady state
    "DOCKYARD_JOB_LOG_HEAD": "256KiB",
    "DOCKYARD_JOB_LOG_TAIL": "1MiB",
    "DOCKYARD_JOB_LOG_RETENTION": "60s",
    "DOCKYARD_EVENTS_MAX_AGE": "2m",  # ~100 events a minute here: 2000 would take 20 minutes
    "DOCKYARD_EVENTS_MAX_COUNT": "2000",
    "DOCKYARD_RECONCILES_MAX_COUNT": "50",
    "DOCKYARD_RUNS_MAX_AGE": "60s",  # finished runs and their jobs: one row per task otherwise
    "DOCKYARD_RETENTION_INTERVAL": "30s",
    "DOCKYARD_LOCAL_JOB_USER": "self",  # jobs run this venv's Python, under a private home
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _du(path: Path, skip: Path | None = None) -> int:
    total = 0
    for folder, dirs, files in os.walk(path):
        if skip is not None and Path(folder) == skip.parent:
            dirs[:] = [d for d in dirs if Path(folder, d) != skip]
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def _sample(pid: int, data: Path, started: float) -> dict[str, Any]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    db = {p.name: p.stat().st_size for p in data.glob("dockyard.db*") if not p.name.endswith("shm")}
    agent_dir = data / "local-agent"
    server_dir = _du(data, skip=agent_dir)
    agent = _du(agent_dir) if agent_dir.exists() else 0
    return {
        "t": round(time.monotonic() - started, 1),
        "load_1m": round(os.getloadavg()[0], 2),
        "rss_mib": round(rss_kib / 1024, 1),
        "open_files": len(os.listdir(f"/proc/{pid}/fd")),
        "db_bytes": sum(db.values()),
        "wal_bytes": db.get("dockyard.db-wal", 0),  # inside db_bytes: SQLite's write-ahead log
        "data_dir_bytes": server_dir,
        "agent_dir_bytes": agent,
        "data_dir_total_bytes": server_dir + agent,
    }


MEDIAN = ("open_files",)
"""Figures compared by the quarters' medians (small integers); the others by their means."""


def _growth(samples: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """Growth over the second half: its last half against its first half, by the means (or
    the medians, for `MEDIAN`), with each half's range."""
    end = samples[-1]["t"]
    third = [float(s[key]) for s in samples if end / 2 <= s["t"] < end * 3 / 4]
    last = [float(s[key]) for s in samples if s["t"] >= end * 3 / 4]
    if not third or not last or not sum(third):
        return None
    center = statistics.median if key in MEDIAN else statistics.fmean
    before, after = center(third), center(last)
    return {
        "percent": round((after - before) / before * 100, 1),
        "by": "median" if key in MEDIAN else "mean",
        "third_quarter": [min(third), round(before, 1), max(third)],
        "last_quarter": [min(last), round(after, 1), max(last)],
        "samples": [len(third), len(last)],
    }


def _until_running(port: int, token: str, apply: Any, within: float = 180.0) -> None:
    """Apply the service (again while it fails: the local instance may not be ready yet)
    until it runs."""
    deadline = time.monotonic() + within
    status = "failed"
    while time.monotonic() < deadline:
        if status in ("failed", "terminated", "done", None):
            apply()
        time.sleep(1.0)
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            status = httpx.post(
                f"http://127.0.0.1:{port}/api/project/main/runs/get",
                json={"run_name": "chatty"},
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            ).json()["status"]
        if status == "running":
            return
    raise SystemExit(f"soak: the service did not start within {within:.0f} s ({status})")


def _apply(dockyard: str, env: dict[str, str], path: Path) -> None:
    subprocess.run(
        [dockyard, "apply", "-f", str(path), "-y", "-d"], env=env, capture_output=True, timeout=60
    )


def main(minutes: float, lines: int, task_every: float, sample_every: float) -> dict[str, Any]:
    load_start = [round(x, 2) for x in os.getloadavg()]
    root = Path(tempfile.mkdtemp(prefix="dockyard-soak-"))
    data, port, service_port = root / "data", _free_port(), _free_port()
    env = (
        os.environ
        | SETTINGS
        | {
            "DOCKYARD_DATA_DIR": str(data),
            "DOCKYARD_CONFIG": str(root / "cli-config.yml"),
        }
    )
    dockyard = str(Path(sys.executable).parent / "dockyard")
    log = (root / "server.log").open("w")
    server = subprocess.Popen(
        [dockyard, "server", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    samples: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while not _answers(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        fleet, service, task = root / "fleet.yml", root / "service.yml", root / "task.yml"
        fleet.write_text("type: fleet\nname: local\nnodes: 1\n")
        loop = LOOP.format(per_tick=max(1, lines // 10))
        service.write_text(SERVICE.format(port=service_port, loop=loop))
        _apply(dockyard, env, fleet)
        token = (data / "admin-token").read_text().strip()
        _until_running(port, token, lambda: _apply(dockyard, env, service))
        started = time.monotonic()
        next_task = next_sample = started
        n = 0
        while time.monotonic() - started < minutes * 60:
            now = time.monotonic()
            if now >= next_task:
                n += 1
                task.write_text(TASK.format(n=n))
                _apply(dockyard, env, task)
                next_task = now + task_every
            if now >= next_sample:
                samples.append(_sample(server.pid, data, started))
                next_sample = now + sample_every
            time.sleep(0.2)
        samples.append(_sample(server.pid, data, started))
    finally:
        token = (
            (data / "admin-token").read_text().strip() if (data / "admin-token").exists() else ""
        )
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"http://127.0.0.1:{port}/api/project/main/runs/stop",
                       json={"runs_names": ["chatty", "tick"], "abort": True},
                       headers={"Authorization": f"Bearer {token}"}, timeout=10)  # fmt: skip
        server.terminate()
        server.wait(timeout=30)
        stop_local_agent(data)
        log.close()
        if os.environ.get("SOAK_KEEP"):
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return _report(samples, minutes, lines, task_every, sample_every, n, load_start)


GOAL_FIGURES = ("rss_mib", "open_files", "db_bytes", "data_dir_bytes", "data_dir_total_bytes")


def _report(
    samples: list[dict[str, Any]],
    minutes: float,
    lines: int,
    task_every: float,
    sample_every: float,
    tasks: int,
    load_start: list[float],
) -> dict[str, Any]:
    growth = {key: _growth(samples, key) for key in (*GOAL_FIGURES, "agent_dir_bytes")}
    load_end = [round(x, 2) for x in os.getloadavg()]
    return {
        "minutes": minutes,
        "lines_per_second": lines,
        "task_every_s": task_every,
        "sample_every_s": sample_every,
        "tasks_applied": tasks,
        "settings": SETTINGS,
        "load_average": {"start": load_start, "end": load_end, "cpus": os.cpu_count()},
        "growth_second_half_percent": {k: g["percent"] if g else None for k, g in growth.items()},
        "goal_percent": 5,
        "goal_met": all((growth[k] or {}).get("percent", 99) < 5 for k in GOAL_FIGURES),
        "growth_detail": growth,
        "method": "second half: last quarter vs third quarter (the first half is the warm-up); "
        "open files by the quarters' medians, the others by their means; detail: [min, "
        "center, max] per quarter. agent_dir_bytes (the local agent's 0-1 MiB saw) is inside "
        "data_dir_total_bytes and not a goal figure on its own",
        "samples": samples,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--lines", type=int, default=1000, help="service log lines per second")
    parser.add_argument("--task-every", type=float, default=5.0)
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    args = parser.parse_args()
    print(json.dumps(main(args.minutes, args.lines, args.task_every, args.sample), indent=2))
