"""GitOps loop figures on the local fleet, as JSON on stdout.

Runs the whole runtime in-process (`build_controller`: every worker, the real local agent
through its SSH server, SQLite in a temp dir) against a git repo on disk, and measures:

- ``latency``: for each of N commits that add a task, the time from the commit (the moment
  a push webhook would queue the reconcile) until the task's job is ``running`` as the
  store records it; p50/p95/max in ms (goals p50 ≤ 150 ms, p95 ≤ 300 ms), beside its floor:
  the same command spawned and reaped on this host right after each sample, no Dockyard;
- ``throughput``: one commit adding M tasks (``echo``), time until every run is ``done``,
  and runs/s (goal ≥ 50), beside the spawn floor: the same M commands run one after the
  other with ``sh -c`` on this host, no Dockyard; with the reconcile's own stage timings
  (commit → every run row written), the rest being the runs and jobs workers and the agent;
  and the CPU per task (/proc utime + stime over the window) of this process, which holds
  the whole server, and of the local agent: a cost that the load changes far less than
  the wall time; and, over the same window, the server's costs per task that no load
  changes: SQL statements (by verb and table) and transactions, and HTTP calls to the
  agent (by method and path); the bench's own polls of the store go through a store of
  their own (not counted; their CPU is this process's);
- ``sql_per_job``: for one commit of 60 and one of 1,000 tasks (all queued at once behind
  the local fleet's capacity), the SQL statements and transactions the server ran from the
  commit until every run was done, divided by the tasks; the ratio of the two (goal:
  constant, ≤ 1.2) and the statements per task (goal ≤ 30) — load-independent costs;
  SQLite's explicit `BEGIN`s are statements here, and also given apart;
- ``proxy``: requests/s through the service proxy beside direct requests/s to the same
  service, and their ratio (goal ≥ 0.7) — `bench/proxy_server.py` (the real
  `dockyard server`) and `bench/proxy.py` (the proxy alone, both of its paths, three kinds
  of service), each run in its own process and embedded here.

    .venv/bin/python bench/reconcile.py [--commits 20] [--tasks 500] [--counted 60,1000]
        [--proxy-seconds 5] [--job-user auto|self|auto,self] [--profile FILE]

Jobs run as processes (`local_job_isolation="process"`), as the spawn floor's commands do;
`--job-user auto` (a root server: each job in the bubblewrap sandbox, a uid of its own),
`self` (no sandbox), or `auto,self`: both, one after the other in one invocation, with
their runs/s ratio. `--profile FILE` writes where the server's CPU went over the
throughput window (`bench/profiling.py`: CPU per thread, cProfiles of the event loop, the
store lane and the default executor; it slows the run: its figures are not the bench's).
The load average (`os.getloadavg()`) is printed beside each figure, before and after: on a
shared machine wall time is theirs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, event, func, select

from agent.client import AgentClient
from agent.local import local_paths, stop_local_agent
from bench.profiling import profiled
from reconciler.adapters.db.models import Job, Run
from reconciler.adapters.db.store import Store
from reconciler.engine.controller import EngineController, build_controller
from reconciler.settings import Settings

TASK = """type: task
name: {name}
commands:
  - '{command}'
resources:
  cpu: 1..
  memory: 0.1GB..
  disk: 0.1GB..
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def job_status(store: Store, project_id: str, run_name: str) -> str | None:
    with store.reading() as session:
        row = (
            session.query(Job.status)
            .join(Run, Run.id == Job.run_id)
            .filter(Run.project_id == project_id, Run.run_name == run_name)
            .first()
        )
    return None if row is None else str(row[0])


def run_statuses(store: Store, project_id: str) -> list[str]:
    with store.reading() as session:
        return [str(s) for (s,) in session.query(Run.status).filter(Run.project_id == project_id)]


ENDED = ("done", "failed", "terminated")


def all_ended(store: Store, project_id: str, runs: int) -> bool:
    """Whether the project has `runs` runs, all ended. The bench's polling runs in the
    server's process, so it is counted as the server's CPU: two counts that read indexes
    only (`ix_runs_project_name`, `ix_runs_status_processed`), never the rows with their
    specs (one COUNT over the rows cost ~9 ms a poll at 1,500 runs, ~2 ms of "server" CPU
    per task at ten polls a second). The bench's store holds its one project only."""
    with store.reading() as session:
        total = session.scalar(select(func.count()).where(Run.project_id == project_id))
        active = session.scalar(select(func.count()).where(Run.status.not_in(ENDED)))
    return int(total or 0) >= runs and not active


async def wait(condition: Any, *, within: float, interval: float = 0.005) -> None:
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(interval)


async def measure_latency(
    controller: EngineController, store: Store, repo: Path, project_id: str, commits: int
) -> tuple[list[float], list[float]]:
    """Commit -> job `running` in the store, and beside each sample its floor: the same
    command spawned and reaped on this host right after, without Dockyard (ms)."""
    samples: list[float] = []
    floors: list[float] = []
    for i in range(commits):
        name = f"lat-{i}"
        commit(repo, {f"{name}.dstack.yml": TASK.format(name=name, command="sleep 3")}, name)
        started = time.perf_counter()
        await controller.request_reconcile("main", trigger="webhook")
        await wait(
            lambda n=name: job_status(store, project_id, n) in ("running", "done"), within=60
        )
        samples.append((time.perf_counter() - started) * 1000)
        floors.append(spawn_floor(1) * 1000)
    return samples, floors


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
        "max": round(ordered[-1], 1),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process so far (/proc), or None if it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def local_agent_pid(data_dir: Path) -> int | None:
    """The local agent's pid, from its state file (None if not started)."""
    try:
        return int(json.loads(local_paths(data_dir).state.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


async def measure_throughput(
    controller: EngineController,
    store: Store,
    repo: Path,
    project_id: str,
    tasks: int,
    agent_pid: int | None = None,
    profile: Path | None = None,
    counters: tuple[SQLCounter, AgentCalls] | None = None,
) -> dict[str, Any]:
    before = len(run_statuses(store, project_id))
    files = {
        f"many-{i}.dstack.yml": TASK.format(name=f"many-{i}", command=f"echo {i}")
        for i in range(tasks)
    }
    commit(repo, files, f"{tasks} tasks")
    server_cpu, agent_cpu = cpu_seconds(os.getpid()), cpu_seconds(agent_pid or 0)
    sql_before = counters[0].snapshot() if counters else (0, 0, 0)
    kinds_before = dict(counters[0].kinds) if counters else {}
    calls_before = counters[1].snapshot() if counters else {}
    started = time.perf_counter()
    with profiled(profile) if profile is not None else contextlib.nullcontext():
        reconcile_id = await controller.request_reconcile("main", trigger="webhook")
        await wait(lambda: all_ended(store, project_id, before + tasks), within=1800, interval=0.1)
    elapsed = time.perf_counter() - started
    costs: dict[str, Any] = {}
    if counters:
        # the server's statements only: `store` here is the bench's observer (main)
        sql_after, calls = (
            counters[0].snapshot(),
            per_task(calls_before, counters[1].snapshot(), tasks),
        )
        costs = {
            "statements_per_task": round((sql_after[0] - sql_before[0]) / tasks, 1),
            # SQLAlchemy's transactions (an unpinned read is one) and SQLite's own BEGINs
            "transactions_per_task": round((sql_after[1] - sql_before[1]) / tasks, 2),
            "begins_per_task": round((sql_after[2] - sql_before[2]) / tasks, 2),
            "statements_per_task_by_kind": per_task(kinds_before, counters[0].kinds, tasks),
            "agent_calls_per_task": round(sum(calls.values()), 2),
            "agent_calls_per_task_by_path": calls,
        }
    cpu = {
        "server": (server_cpu, cpu_seconds(os.getpid())),
        "agent": (agent_cpu, cpu_seconds(agent_pid or 0)),
    }
    cpu_per_task = {
        f"{who}_cpu_ms_per_task": round((end - start) * 1000 / tasks, 1)
        for who, (start, end) in cpu.items()
        if start is not None and end is not None
    }
    failed = sum(1 for s in run_statuses(store, project_id) if s != "done")
    reconcile = store.get_reconcile(reconcile_id)
    stages = {t["stage"]: t["seconds"] for t in (reconcile.stage_timings if reconcile else [])}
    return (
        {
            "tasks": tasks,
            "reconcile_stage_seconds": stages,
            "seconds": round(elapsed, 2),
            "runs_per_second": round(tasks / elapsed, 2),
            "not_done": failed,
        }
        | cpu_per_task
        | costs
    )


class AgentCalls:
    """Counts the server's HTTP calls to its agents, by method and path (the job id
    left out), over a window: `AgentClient._call` wrapped for the bench's lifetime."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        original = AgentClient._call

        async def counted(client: AgentClient, method: str, path: str, **kwargs: Any) -> Any:
            parts = path.split("/")
            key = f"{method} " + "/".join(
                "{id}" if i == 2 and parts[1] == "jobs" and len(p) > 20 else p
                for i, p in enumerate(parts)
            )
            self.calls[key] = self.calls.get(key, 0) + 1
            return await original(client, method, path, **kwargs)

        AgentClient._call = counted  # type: ignore[method-assign, assignment]

    def snapshot(self) -> dict[str, int]:
        return dict(self.calls)


def per_task(before: dict[str, int], after: dict[str, int], tasks: int) -> dict[str, float]:
    """What grew between two snapshots, per task (zeros left out)."""
    grown = {k: v - before.get(k, 0) for k, v in after.items()}
    return {k: round(v / tasks, 2) for k, v in sorted(grown.items()) if v}


class SQLCounter:
    """Counts the statements and transactions run on an engine (SQLAlchemy events)."""

    def __init__(self, engine: Engine) -> None:
        self.statements = 0
        self.begins = 0  # SQLite's explicit BEGIN / BEGIN IMMEDIATE, counted among statements
        self.transactions = 0
        self.kinds: dict[str, int] = {}  # "UPDATE jobs", "SELECT runs", ...
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "begin", self._begin)

    def _statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.statements += 1
        if statement.startswith("BEGIN"):
            self.begins += 1
        kind = statement_kind(statement)
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def _begin(self, *args: Any) -> None:
        self.transactions += 1

    def snapshot(self) -> tuple[int, int, int]:
        return self.statements, self.transactions, self.begins


def statement_kind(statement: str) -> str:
    """The verb and main table of a statement ("UPDATE jobs"; "BEGIN" alone): the first
    table named outside parentheses (a subquery's is not the statement's)."""
    words = statement.replace("(", " ( ").replace(")", " ) ").split()
    verb = words[0].upper() if words else "?"
    key = {"SELECT": "FROM", "DELETE": "FROM", "INSERT": "INTO", "UPDATE": "UPDATE"}.get(verb)
    if key is None:
        return verb
    depth = 0
    for at, word in enumerate(words):
        depth += (word == "(") - (word == ")")
        if depth == 0 and word.upper() == key and at + 1 < len(words):
            return f"{verb} {words[at + 1].strip(chr(34))}"
    return f"{verb} ?"


def spawn_floor(tasks: int) -> float:
    """Seconds to run the throughput's commands one after the other, without Dockyard."""
    started = time.perf_counter()
    for i in range(tasks):
        subprocess.run(["sh", "-c", f"echo {i}"], capture_output=True, check=True)
    return time.perf_counter() - started


async def measure_sql(
    controller: EngineController,
    store: Store,  # the bench's own connection: its reads are not counted
    repo: Path,
    project_id: str,
    counter: SQLCounter,
    tasks: int,
) -> dict[str, Any]:
    """Statements and transactions per task for one commit of `tasks` tasks, to all done."""
    before = len(run_statuses(store, project_id))
    files = {
        f"q{tasks}-{i}.dstack.yml": TASK.format(name=f"q{tasks}-{i}", command="true")
        for i in range(tasks)
    }
    commit(repo, files, f"{tasks} queued tasks")
    statements, transactions, begins = counter.snapshot()
    started = time.perf_counter()
    await controller.request_reconcile("main", trigger="webhook")

    await wait(lambda: all_ended(store, project_id, before + tasks), within=3600, interval=0.25)
    elapsed = time.perf_counter() - started
    ran_statements, ran_transactions, ran_begins = counter.snapshot()
    ran = ran_statements - statements
    return {
        "tasks": tasks,
        "seconds": round(elapsed, 1),
        "runs_per_second": round(tasks / elapsed, 2),
        "statements_per_task": round(ran / tasks, 1),
        "statements_per_task_without_begin": round((ran - (ran_begins - begins)) / tasks, 1),
        "transactions_per_task": round((ran_transactions - transactions) / tasks, 1),
        "load_average_after": load_average(),
    }


async def main(
    commits: int,
    tasks: int,
    counted: list[int],
    job_user: str = "auto",
    profile: Path | None = None,
    calls: AgentCalls | None = None,
) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    load_start = load_average()
    with tempfile.TemporaryDirectory(prefix="dockyard-bench-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "bench@localhost")
        git(repo, "config", "user.name", "bench")
        commit(repo, {"warmup.dstack.yml": TASK.format(name="warmup", command="true")}, "init")
        settings = Settings(
            repo=str(repo),
            data_dir=root / "data",
            fetch_interval=3600,
            cli_config=root / "c",
            local_job_isolation="process",  # as the spawn floor: no container per job
            # auto: a root server's process jobs run in the bubblewrap sandbox, a uid each;
            # self: as the server's own user, no switch and no sandbox (the cost's baseline)
            local_job_user=job_user,
        )
        store = Store.from_url(f"sqlite:///{root / 'dockyard.db'}", migrate=True)
        counter = SQLCounter(store.engine)
        calls = calls or AgentCalls()
        controller = build_controller(settings, store)
        project_id = store.get_or_create_project("main").id
        await controller.start()
        try:
            await wait(lambda: run_statuses(store, project_id) == ["done"], within=120)
            load_latency = load_average()
            latency, floors = await measure_latency(controller, store, repo, project_id, commits)
            load_throughput = load_average()
            agent_pid = local_agent_pid(root / "data")
            # the bench's own reads on a connection of their own: not among the counts
            observer = Store.from_url(f"sqlite:///{root / 'dockyard.db'}")
            throughput = await measure_throughput(
                controller, observer, repo, project_id, tasks, agent_pid, profile, (counter, calls)
            )
            throughput["load_average_before"] = load_throughput
            throughput["load_average_after"] = load_average()
            sql = [
                await measure_sql(controller, observer, repo, project_id, counter, n)
                for n in counted
            ]
            observer.close()
        finally:
            await controller.stop()
            stop_local_agent(root / "data")
            store.close()
    return {
        "bench": "reconcile",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average": {"start": load_start, "end": load_average()},
        "database": "sqlite",
        "latency_commit_to_running_ms": {"commits": commits}
        | percentiles(latency)
        | {
            "goal_p50": 150,
            "goal_p95": 300,
            "spawn_floor_ms": percentiles(floors),
            "load_average_before": load_latency,
        },
        "throughput": throughput | {"goal_runs_per_second": 50} | floor(tasks, throughput),
        "sql_per_job": sql_figures(sql),
    }


def floor(tasks: int, throughput: dict[str, Any]) -> dict[str, Any]:
    """The spawn floor of the same commands, beside Dockyard's figure."""
    seconds = spawn_floor(tasks)
    return {
        "spawn_floor_seconds": round(seconds, 2),
        "spawn_floor_runs_per_second": round(tasks / seconds, 1),
        "seconds_over_floor": round(throughput["seconds"] / seconds, 1),
    }


def sql_figures(sql: list[dict[str, Any]]) -> dict[str, Any]:
    figures: dict[str, Any] = {"counts": sql, "goal_ratio": 1.2, "goal_statements_per_task": 30}
    if len(sql) >= 2 and sql[0]["statements_per_task"]:
        figures["statements_ratio_last_to_first"] = round(
            sql[-1]["statements_per_task"] / sql[0]["statements_per_task"], 2
        )
        figures["transactions_ratio_last_to_first"] = round(
            sql[-1]["transactions_per_task"] / max(sql[0]["transactions_per_task"], 0.1), 2
        )
    return figures


def proxy_figures(seconds: float) -> dict[str, Any]:
    """The proxy benches' JSON, each from its own process (0 seconds: skipped)."""
    if seconds <= 0:
        return {}
    here = Path(__file__).resolve().parent
    figures: dict[str, Any] = {}
    for name in ("proxy_server", "proxy"):
        done = subprocess.run(
            [sys.executable, str(here / f"{name}.py"), "--seconds", str(seconds)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            figures[name] = {"error": done.stderr.strip().splitlines()[-1:]}
        else:
            figures[name] = json.loads(done.stdout)
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--counted", default="60,1000", help="queue sizes for sql_per_job")
    parser.add_argument("--proxy-seconds", type=float, default=5.0)
    parser.add_argument(
        "--job-user",
        default="auto",
        help="the local agent's job user: auto (sandboxed when root) or self (no sandbox); "
        "auto,self runs the bench for each, one after the other, and gives their ratio",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="write where the server's CPU went over the throughput to this file (profiling.py)",
    )
    args = parser.parse_args()
    counted = [int(n) for n in args.counted.split(",") if n]
    users = [u for u in args.job_user.split(",") if u]
    calls = AgentCalls()  # wraps the client once for every run below
    runs = {
        user: asyncio.run(main(args.commits, args.tasks, counted, user, args.profile, calls))
        for user in users
    }
    result = runs[users[0]] | {"job_user": users[0]}
    if len(users) > 1:  # e.g. auto,self: the sandbox's cost, measured one after the other
        result["by_job_user"] = {user: run["throughput"] for user, run in runs.items()}
        first, second = (runs[u]["throughput"] for u in users[:2])
        result[f"runs_per_second_{users[0]}_over_{users[1]}"] = round(
            first["runs_per_second"] / second["runs_per_second"], 2
        )
    result["proxy"] = proxy_figures(args.proxy_seconds)
    print(json.dumps(result, indent=2))
