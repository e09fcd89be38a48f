"""A soak: `dockyard server` for a set time with a chatty service and a task every few seconds.

Starts the real server (its own process, SQLite, the local agent) with day-two settings scaled
to the run's length, applies a service that prints `--lines` lines per second (and serves
HTTP), and re-applies a short task every `--task-every` seconds (a changed command each time,
so each is a new run). Every `--sample` seconds it records the server process's memory (RSS)
and open files, the database's size (with its WAL) and the data dir's size — the server's
copy of logs and state, and the local agent's dir (its own job output) apart. Prints JSON:
the samples, and per figure its growth over the second half of the run (the mean of the last
quarter against the mean of the third; goal: under 5% after the warm-up of the first half).

    python bench/soak.py [--minutes 10] [--lines 1000] [--task-every 5] [--sample 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
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
    "DOCKYARD_EVENTS_MAX_COUNT": "2000",
    "DOCKYARD_RECONCILES_MAX_COUNT": "50",
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
    db = sum(p.stat().st_size for p in data.glob("dockyard.db*") if p.name != "dockyard.db-shm")
    agent_dir = data / "local-agent"
    return {
        "t": round(time.monotonic() - started, 1),
        "rss_mib": round(rss_kib / 1024, 1),
        "open_files": len(os.listdir(f"/proc/{pid}/fd")),
        "db_bytes": db,
        "data_dir_bytes": _du(data, skip=agent_dir),
        "agent_dir_bytes": _du(agent_dir) if agent_dir.exists() else 0,
    }


def _growth(samples: list[dict[str, Any]], key: str) -> float | None:
    """Growth over the second half: the mean of its last half against the mean of its first
    half (sawtooth figures, like a log tail compacted now and then, average out)."""
    end = samples[-1]["t"]
    third = [float(s[key]) for s in samples if end / 2 <= s["t"] < end * 3 / 4]
    last = [float(s[key]) for s in samples if s["t"] >= end * 3 / 4]
    if not third or not last or not sum(third):
        return None
    before, after = sum(third) / len(third), sum(last) / len(last)
    return round((after - before) / before * 100, 1)


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
    keys = ("rss_mib", "open_files", "db_bytes", "data_dir_bytes", "agent_dir_bytes")
    return {
        "minutes": minutes,
        "lines_per_second": lines,
        "task_every_s": task_every,
        "tasks_applied": n,
        "settings": SETTINGS,
        "growth_second_half_percent": {key: _growth(samples, key) for key in keys},
        "goal_percent": 5,
        "samples": samples,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--lines", type=int, default=1000, help="service log lines per second")
    parser.add_argument("--task-every", type=float, default=5.0)
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    args = parser.parse_args()
    print(json.dumps(main(args.minutes, args.lines, args.task_every, args.sample), indent=2))
