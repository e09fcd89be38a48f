"""A thousand sleeping tasks held by `dockyard server` (SQLite, or replicas on PostgreSQL), as JSON.

Starts the real server (its own process) on a temporary git repo of N tasks that sleep
(`cpu: 0..`, `memory: 10MB..`: on the local fleet a job takes the blocks its minimums need,
docs/fleets.md), waits until the store records all N `running` and the jobs worker owes
none of them a pass (``seconds_to_settled``), then measures:

- ``server_cpu``: the server process's CPU (user + system, from /proc) over a quiet window,
  as % of one core (goal ≤ 5 %); beside it the local agent's (it holds the N processes);
- ``healthcheck``: `GET /healthcheck` latency while the N jobs sleep (p50/p99/max in ms,
  goal p99 ≤ 50 ms), requests sent one after the other;
- the time from the commit to all N running, and the load average beside each figure (the
  dev VM is shared: the CPU share is what the server used, not wall time).

Then stops the runs through the API and waits until no job of them is left running.
``left_running`` is what the store says; ``processes_when_ended`` counts, in /proc, the
processes that still carry the bench agent's job marker (``DOCKYARD_JOB_AGENT``) when the
store says every job ended, and ``left_processes`` those still there up to 60 s later
(``seconds_to_no_process``: a job the server failed `instance_unreachable` is stopped at
the agent's next answered check, every 14 s). Goal 0. Should any survive,
``survivors`` says what the store, the agent's ``job.json`` and both logs say of their
jobs (all of it also written to ``--survivors-file``), and the bench kills them by pid.
With `--postgres`, `--replicas` servers (default 2) share a private PostgreSQL cluster
(`tests/services/postgres.py`) and one data dir (one local agent); each server's CPU and
healthcheck are given.

    .venv/bin/python bench/sleeping.py [--tasks 1000] [--window 30] [--requests 300]
        [--postgres [--replicas 2]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.local import local_paths, stop_local_agent  # noqa: E402
from agent.server.executors import proctable  # noqa: E402
from agent.server.jobaccount import agent_tag  # noqa: E402
from tests.services.postgres import find_postgres_bin, start_postgres  # noqa: E402

TASK = """type: task
name: {name}
commands:
  - sleep 1800
resources:
  cpu: 0..
  memory: 10MB..
"""
CPU_GOAL = 5.0
HEALTH_P99_GOAL = 50.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _repo(root: Path, tasks: int) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for i in range(tasks):
        (repo / f"sleep-{i}.dstack.yml").write_text(TASK.format(name=f"sleep-{i}"))
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


def _counter(url: str) -> Callable[[str], int]:
    """How many jobs have a status, read straight from the database (not the server)."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))

        def count_sqlite(status: str) -> int:
            if not path.exists():
                return 0
            try:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
                    query = "SELECT count(*) FROM jobs WHERE status = ?"
                    return int(conn.execute(query, (status,)).fetchone()[0])
            except sqlite3.Error:
                return 0

        return count_sqlite
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")

    def count_postgres(status: str) -> int:
        try:
            with psycopg.connect(conninfo) as conn:
                row = conn.execute("SELECT count(*) FROM jobs WHERE status = %s", (status,))
                found = row.fetchone()
        except psycopg.Error:
            return 0
        return int(found[0]) if found else 0

    return count_postgres


OVERDUE_SQLITE = (
    "SELECT count(*) FROM jobs WHERE status = 'running' AND due_at IS NOT NULL"
    " AND CAST(strftime('%s', due_at) AS INTEGER) <= CAST(strftime('%s', 'now') AS INTEGER)"
)
OVERDUE_POSTGRES = (
    "SELECT count(*) FROM jobs WHERE status = 'running' AND due_at IS NOT NULL AND due_at <= now()"
)


def _overdue(url: str) -> Callable[[], int]:
    """How many running jobs are due now: passes the jobs worker still owes them (after the
    store records a job running from its agent's event, the job's own pass follows)."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))

        def overdue_sqlite() -> int:
            try:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
                    return int(conn.execute(OVERDUE_SQLITE).fetchone()[0])
            except sqlite3.Error:
                return -1

        return overdue_sqlite
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")

    def overdue_postgres() -> int:
        try:
            with psycopg.connect(conninfo) as conn:
                found = conn.execute(OVERDUE_POSTGRES).fetchone()
        except psycopg.Error:
            return -1
        return int(found[0]) if found else 0

    return overdue_postgres


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_share(pids: dict[str, int], window: float) -> dict[str, float]:
    """% of one core each process used over `window` seconds of wall time."""
    before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - started
    return {
        name: round(100 * (_cpu_seconds(pid) - before[name]) / elapsed, 2)
        for name, pid in pids.items()
    }


def _healthcheck(port: int, requests: int) -> dict[str, Any]:
    samples = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        for _ in range(requests):
            started = time.perf_counter()
            client.get("/healthcheck").raise_for_status()
            samples.append((time.perf_counter() - started) * 1000)
            time.sleep(0.05)
    ordered = sorted(samples)
    return {
        "requests": requests,
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[max(0, int(len(ordered) * 0.99) - 1)], 1),
        "max_ms": round(ordered[-1], 1),
        "goal_p99_ms": HEALTH_P99_GOAL,
    }


def _wait(condition: Any, within: float, interval: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


def _agent_pid(data: Path) -> int | None:
    state = data / "local-agent" / "state.json"
    if not state.exists():
        return None
    pid = json.loads(state.read_text()).get("pid")
    return int(pid) if pid else None


def _stop(port: int, data: Path, count: Callable[[str], int], tasks: int) -> str | None:
    """Stop the runs through the API (20 names a request) and wait until none is left
    running; the first error, if any (the caller still reports what it measured)."""
    token = (data / "admin-token").read_text().strip()
    names = [f"sleep-{i}" for i in range(tasks)]
    error = None
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
        for start in range(0, tasks, 20):
            try:
                client.post(
                    "/api/project/main/runs/stop",
                    json={"runs_names": names[start : start + 20], "abort": True},
                    headers={"Authorization": f"Bearer {token}"},
                )
            except httpx.HTTPError as exc:
                error = error or f"stop: {exc!r}"
    _wait(lambda: count("running") + count("terminating") == 0, within=900)
    return error


def _marked(data: Path) -> dict[str, list[int]]:
    """Live processes of the bench agent's jobs (its `DOCKYARD_JOB_AGENT` tag), by job id."""
    tag = agent_tag(local_paths(data).data_dir)
    return {job: [s.pid for s in stats] for job, stats in proctable.marked_processes(tag).items()}


def _store_rows(url: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Status, reason and message the store holds for these agent job ids."""
    query = (
        "SELECT agent_job_id, id, status, termination_reason, status_message, exit_status "
        "FROM jobs WHERE agent_job_id IN ({0}) OR id IN ({0})"
    )
    keys = ("agent_job_id", "id", "status", "termination_reason", "status_message", "exit")
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30) as conn:
            rows = conn.execute(query.format(",".join("?" * len(ids))), ids + ids).fetchall()
    else:
        conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo) as conn:
            marks = ",".join(["%s"] * len(ids))
            rows = conn.execute(query.format(marks), ids + ids).fetchall()
    return {str(row[0] or row[1]): dict(zip(keys, row, strict=True)) for row in rows}


def _grep(path: Path, needles: list[str], each: int = 6) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {needle: [] for needle in needles}
    if not path.exists():
        return found
    with path.open(errors="replace") as handle:
        for line in handle:
            for needle in needles:
                if needle in line and len(found[needle]) < each:
                    found[needle].append(line.rstrip()[:400])
    return found


def _survivors(root: Path, url: str, marked: dict[str, list[int]]) -> dict[str, Any]:
    """What is known of the jobs whose processes outlived their end in the store."""
    data = root / "data"
    ids = sorted(marked)
    store = _store_rows(url, ids)
    agent_dir = local_paths(data).data_dir / "jobs"
    agent_log = _grep(local_paths(data).log, ids)
    server_log = _grep(root / "server-0.log", ids)
    jobs = []
    for job_id in ids:
        record = agent_dir / job_id / "job.json"
        stored = json.loads(record.read_text()) if record.exists() else None
        pid_file = agent_dir / job_id / "pid.json"
        jobs.append({
            "job": job_id,
            "pids": marked[job_id],
            "store": store.get(job_id),
            "agent_state": (stored or {}).get("state"),
            "agent_stop": (stored or {}).get("stop"),
            "agent_record": "present" if stored is not None else "absent",
            "pid_json": json.loads(pid_file.read_text()) if pid_file.exists() else None,
            "agent_log": agent_log[job_id],
            "server_log": server_log[job_id],
        })  # fmt: skip

    def count(key: Callable[[dict[str, Any]], object]) -> dict[str, int]:
        counted: dict[str, int] = {}
        for job in jobs:
            name = str(key(job))
            counted[name] = counted.get(name, 0) + 1
        return counted

    return {
        "jobs": len(jobs),
        "by_store": count(lambda j: (j["store"] or {}).get("termination_reason")),
        "by_store_status": count(lambda j: (j["store"] or {}).get("status")),
        "by_agent_record": count(lambda j: j["agent_record"]),
        "by_agent_status": count(lambda j: (j["agent_state"] or {}).get("status")),
        "examples": jobs[:3],
        "all": jobs,
    }


def _kill(marked: dict[str, list[int]]) -> int:
    killed = 0
    for pids in marked.values():
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def _start_servers(root: Path, repo: Path, url: str, replicas: int) -> list[Server]:
    """`replicas` servers on one database and one data dir (so one local agent)."""
    env = os.environ | {
        "DOCKYARD_DATA_DIR": str(root / "data"),
        "DOCKYARD_CONFIG": str(root / "cli-config.yml"),
        "DOCKYARD_LOCAL_JOB_ISOLATION": "process",  # the control plane's cost, no containers
    }
    dockyard = str(Path(sys.executable).parent / "dockyard")
    servers = []
    for i in range(replicas):
        port = _free_port()
        log = (root / f"server-{i}.log").open("w")
        command = [dockyard, "server", "--repo", str(repo), "--port", str(port), "--db", url]
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        servers.append(Server(proc, port, log))
        _wait(lambda p=port: _answers(p), within=120, interval=0.5)
    return servers


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: IO[str]


def measure(root: Path, url: str, tasks: int, replicas: int, args: Any) -> dict[str, Any]:
    """Start the servers on a repo of `tasks` sleeping tasks, measure, stop everything."""
    repo = _repo(root, tasks)
    data = root / "data"
    count = _counter(url)
    started = time.monotonic()
    servers = _start_servers(root, repo, url, replicas)
    result: dict[str, Any] = {"bench": "sleeping", "tasks": tasks, "replicas": replicas}
    try:
        result["all_running"] = _wait(lambda: count("running") >= tasks, within=3600)
        result["seconds_to_all_running"] = round(time.monotonic() - started, 1)
        # The store records a job running from its agent's event; the job's own pass (ports,
        # logs) follows. Measure "while they wait": once no running job is due any more.
        overdue = _overdue(url)
        result["overdue_when_all_running"] = overdue()
        result["settled"] = _wait(lambda: overdue() == 0, within=600)
        result["seconds_to_settled"] = round(time.monotonic() - started, 1)
        pids = {f"server_{i}": s.proc.pid for i, s in enumerate(servers)}
        agent = _agent_pid(data)
        if agent is not None:
            pids["local_agent"] = agent
        result["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
        shares = _cpu_share(pids, args.window)
        result["cpu_percent_of_one_core"] = shares | {
            "window_s": args.window,
            "goal_each_server": CPU_GOAL,
        }
        result["healthcheck"] = {
            f"server_{i}": _healthcheck(s.port, args.requests) for i, s in enumerate(servers)
        }
        result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        result["still_running"] = count("running")
        print(json.dumps(result), file=sys.stderr, flush=True)  # kept if the stop fails
    finally:
        try:  # the jobs outlive the server and its agent by design: stop them
            result["stop_error"] = _stop(servers[0].port, data, count, tasks)
        finally:
            result["left_running"] = count("running")
            marked = _marked(data)  # the store says every job ended: nothing may live on
            result["processes_when_ended"] = sum(len(pids) for pids in marked.values())
            ended = time.monotonic()
            _wait(lambda: not _marked(data), within=60, interval=1.0)
            marked = _marked(data)
            result["left_processes"] = sum(len(pids) for pids in marked.values())
            if not marked:
                result["seconds_to_no_process"] = round(time.monotonic() - ended, 1)
            if marked:
                survivors = _survivors(root, url, marked)
                Path(args.survivors_file).write_text(json.dumps(survivors, indent=1))
                del survivors["all"]
                result["survivors"] = survivors | {"file": args.survivors_file}
                result["survivors_killed_by_bench"] = _kill(_marked(data))
            for server in servers:
                server.proc.terminate()
                server.proc.wait(timeout=60)
                server.log.close()
            stop_local_agent(data)
    return result


def main(args: Any) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="dockyard-bench-sleeping-"))
    try:
        if not args.postgres:
            url = f"sqlite:///{root / 'dockyard.db'}"
            result = {"database": "sqlite"} | measure(root, url, args.tasks, 1, args)
        else:
            bin_dir = find_postgres_bin()
            if bin_dir is None:
                raise SystemExit("bench: no PostgreSQL binaries (initdb, pg_ctl)")
            with start_postgres(bin_dir) as pg:
                url = pg.create_database()
                result = {"database": "postgresql"} | measure(
                    root, url, args.tasks, args.replicas, args
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["machine"] = {"cpus": os.cpu_count()}
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--window", type=float, default=30.0, help="seconds CPU is measured")
    parser.add_argument("--requests", type=int, default=300, help="healthchecks per server")
    parser.add_argument("--postgres", action="store_true", help="a private PostgreSQL cluster")
    parser.add_argument("--replicas", type=int, default=2, help="servers (with --postgres)")
    parser.add_argument(
        "--survivors-file",
        default=f"/tmp/dockyard-bench-sleeping-survivors-{os.getpid()}.json",
        help="where what is known of processes left behind goes (when any are)",
    )
    print(json.dumps(main(parser.parse_args()), indent=2))
