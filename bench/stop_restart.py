"""A user's stop through local agent kills (issue 31): runs stopped while their agent is
SIGKILLed must end `terminated` / `stopped_by_user`, never `done`; prints JSON.

The whole runtime in-process (`build_controller`: every worker, the real local agent, SQLite
in a temp dir, or with `--postgres` a throwaway PostgreSQL cluster as the tests start one).
Tasks print a line a second for `--seconds` and end on their own; in each of `--kills`
rounds, a round's share of `--tasks` is submitted, and once all run, its share of
`--stopped` is stopped (`stop_run`, `abort: false`, as `runs/stop`) and the local
agent is SIGKILLed 0.15 s later; the next round starts once the server has started another
agent. Figures, beside a control phase that does the same without the kills:

- ``stopped_runs``: the stopped runs by final status and reason (``done_after_stop``: those
  ending `done`, which must be 0);
- ``stop_to_gone_s``: for each stopped run, seconds from its stop to the moment no process
  of its job is left on the host (found by the job's marker in /proc), p50 and max;
- ``kill_to_new_agent_s``: seconds from each kill to the next agent's process running (the
  server noticing the death and starting another), ``kill_to_agent_listening_s`` to its
  HTTP port accepting connections (its Python start-up and re-adoption are most of it), and
  ``agent_listening_to_gone_s``: for each stopped job still running then, seconds from the
  new agent listening to its processes gone (the server seeing it back and sending the stop).

    .venv/bin/python bench/stop_restart.py [--tasks 100] [--stopped 50] [--kills 9]
        [--seconds 10] [--postgres]

Jobs run as processes as the server's own user (`local_job_user="self"`, no sandbox):
the kills, not the sandbox, are measured. On the shared 2-CPU dev VM it takes minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.local import local_agent_alive, local_paths, stop_local_agent
from agent.server.executors import proctable
from agent.server.jobaccount import agent_tag
from reconciler.adapters.db.store import Store
from reconciler.engine.controller import EngineController, build_controller
from reconciler.settings import Settings
from tests.services.postgres import find_postgres_bin, start_postgres

TASK = """type: task
name: {name}
commands:
  - 'for i in $(seq 1 {seconds}); do echo line $i; sleep 1; done'
resources:
  cpu: 0..
  memory: 10MB..
  disk: 0.1GB..
"""
FINAL = ("done", "failed", "terminated", "aborted")


async def _until(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {within:.0f} s")
        await asyncio.sleep(0.05)


def _agent_pid(data_dir: Path) -> int:
    state = json.loads((local_paths(data_dir).root / "state.json").read_text())
    return int(state["pid"])


class Phase:
    """One phase (with or without kills) on a running controller."""

    def __init__(self, controller: EngineController, store: Store, data_dir: Path) -> None:
        self.controller, self.store, self.data_dir = controller, store, data_dir
        self.project_id = store.get_or_create_project("main").id
        self.tag = agent_tag(local_paths(data_dir).data_dir)
        self.stopped_at: dict[str, float] = {}  # agent job id -> when its run was stopped
        self.gone_at: dict[str, float] = {}
        self.stopped_runs: list[str] = []
        self.agent_back: list[float] = []  # seconds from each kill to its successor running
        self.listening: list[float] = []  # ... to its successor accepting connections
        self.back_at: dict[str, float] = {}  # agent job id -> when its new agent listened

    def _runs(self, names: list[str]) -> dict[str, Any]:
        wanted = set(names)
        return {
            r.run_name: r for r in self.store.list_runs(self.project_id) if r.run_name in wanted
        }

    def _all_running(self, names: list[str]) -> bool:
        runs = self._runs(names)
        return len(runs) == len(names) and all(r.status == "running" for r in runs.values())

    def _describe(self, names: list[str]) -> str:
        found = []
        for name, run in self._runs(names).items():
            jobs = [f"{j.status} {j.status_message!r}" for j in self.store.list_jobs(run.id)]
            found.append(f"{name}: {run.status} {run.status_message!r} {jobs}")
        return "; ".join(found)

    def _listening(self) -> bool:
        state = json.loads((local_paths(self.data_dir).root / "state.json").read_text())
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", int(state["http_port"]))) == 0

    def _new_agent(self, before: int) -> bool:
        return _agent_pid(self.data_dir) != before and local_agent_alive(self.data_dir)

    def _job_ids(self, names: list[str]) -> dict[str, str]:
        found = {}
        for name, run in self._runs(names).items():
            for job in self.store.list_jobs(run.id):
                found[name] = job.agent_job_id or job.id
        return found

    async def _watch(self) -> None:
        """Marks when each stopped job's processes are gone (polls /proc)."""
        while True:
            alive = await asyncio.to_thread(proctable.marked_processes, self.tag)
            now = time.monotonic()
            for job_id in self.stopped_at:
                if job_id not in self.gone_at and not alive.get(job_id):
                    self.gone_at[job_id] = now
            await asyncio.sleep(0.02)

    async def run(self, prefix: str, tasks: int, stopped: int, rounds: int, seconds: int,
                  kill: bool) -> dict[str, Any]:  # fmt: skip
        watcher = asyncio.create_task(self._watch())
        names_all: list[str] = []
        kills = 0
        try:
            for r in range(rounds):
                count = tasks // rounds + (1 if r < tasks % rounds else 0)
                stop = stopped // rounds + (1 if r < stopped % rounds else 0)
                names = [f"{prefix}-{r}-{i}" for i in range(count)]
                names_all += names
                for name in names:
                    text = TASK.format(name=name, seconds=seconds)
                    await self.controller.apply_unmanaged(
                        "main", text=text, path=f"{name}.dstack.yml", user="bench", force=True
                    )
                try:
                    await _until(lambda n=names: self._all_running(n), 120, "runs running")
                except TimeoutError as exc:
                    raise TimeoutError(f"{exc}: {self._describe(names)}") from None
                ids = self._job_ids(names)
                before = _agent_pid(self.data_dir)
                for name in names[:stop]:
                    self.stopped_at[ids[name]] = time.monotonic()
                    self.stopped_runs.append(name)
                    await self.controller.stop_run("main", name, abort=False)
                if kill:
                    await asyncio.sleep(0.15)
                    os.kill(before, signal.SIGKILL)
                    killed_at = time.monotonic()
                    kills += 1
                    await _until(lambda b=before: self._new_agent(b), 120, "a new agent")
                    self.agent_back.append(time.monotonic() - killed_at)
                    await _until(self._listening, 120, "the new agent to listen")
                    self.listening.append(time.monotonic() - killed_at)
                    for name in names[:stop]:
                        self.back_at[ids[name]] = time.monotonic()
            await _until(lambda: all(r.status in FINAL for r in self._runs(names_all).values()),
                         300, "every run to end")  # fmt: skip
            await _until(lambda: len(self.gone_at) == len(self.stopped_at), 60, "processes gone")
        finally:
            watcher.cancel()
        runs = self._runs(self.stopped_runs)
        outcomes = Counter(f"{r.status}/{r.termination_reason}" for r in runs.values())
        others = Counter(
            f"{r.status}/{r.termination_reason}"
            for n, r in self._runs(names_all).items()
            if n not in runs
        )
        gone = sorted(self.gone_at[j] - self.stopped_at[j] for j in self.stopped_at)
        after = [self.gone_at[j] - t for j, t in self.back_at.items() if self.gone_at[j] >= t]
        return {
            "agent_kills": kills,
            "tasks": len(names_all),
            "stopped": len(runs),
            "stopped_runs": dict(outcomes),
            "done_after_stop": sum(r.status == "done" for r in runs.values()),
            "other_runs": dict(others),
            "stop_to_gone_s": _spread(gone),
            "kill_to_new_agent_s": _spread(self.agent_back) if self.agent_back else None,
            "kill_to_agent_listening_s": _spread(self.listening) if self.listening else None,
            "agent_listening_to_gone_s": _spread(after) if after else None,
            "gone_before_agent_listened": len(gone) - len(after) if self.back_at else None,
        }


def _spread(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 3), "max": round(max(values), 3)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="dockyard-bench-") as tmp:
        root = Path(tmp)
        data_dir = root / "data"
        settings = Settings(
            data_dir=data_dir,
            cli_config=root / "c",
            db=args.db,
            local_job_isolation="process",
            local_job_user="self",
        )
        store = Store.from_url(args.db or f"sqlite:///{root / 'dockyard.db'}", migrate=True)
        controller = build_controller(settings, store)
        await controller.start()
        try:
            await controller.apply_unmanaged(
                "main", text="type: fleet\nname: local\nnodes: 1\n", path="fleet.dstack.yml",
                user="bench", force=True,
            )  # fmt: skip
            phase = Phase(controller, store, data_dir)
            kills = await phase.run(
                "k", args.tasks, args.stopped, args.kills, args.seconds, kill=True
            )
            phase = Phase(controller, store, data_dir)
            control = await phase.run(
                "c", args.tasks, args.stopped, args.kills, args.seconds, kill=False
            )
        finally:
            await controller.stop()
            stop_local_agent(data_dir)
            store.close()
    return {
        "bench": "stop_restart",
        "database": "postgresql" if args.db else "sqlite",
        "task_seconds": args.seconds,
        "with_agent_kills": kills,
        "control_no_kills": control,
        "load_average": list(os.getloadavg()),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--stopped", type=int, default=50)
    parser.add_argument("--kills", type=int, default=9)
    parser.add_argument("--seconds", type=int, default=10, help="how long each task prints")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL (default: SQLite)")
    args = parser.parse_args()
    args.db = None
    if not args.postgres:
        print(json.dumps(asyncio.run(main(args)), indent=2))
        sys.exit(0)
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        parser.error("no PostgreSQL binaries found (initdb, pg_ctl)")
    with start_postgres(bin_dir) as server:
        args.db = server.create_database()
        print(json.dumps(asyncio.run(main(args)), indent=2))
