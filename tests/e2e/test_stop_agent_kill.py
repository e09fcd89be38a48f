"""A user's stop is the user's, whatever happens to the agent in between (issue 31).

The real `dockyard server` (HTTP API, every worker, the local agent it starts) on SQLite
and PostgreSQL; tasks print a line every 0.2 s until their gate file appears. The local
agent is frozen (SIGSTOP), half of the runs are stopped through `runs/stop`, those tasks
then end on their own (exit 0) while their agent cannot tell anyone, and the agent is
SIGKILLed: the server starts another, which re-adopts the jobs and reports them `exited 0`.
Every stopped run still ends `terminated` / `stopped_by_user` (its job `terminated_by_user`),
as dstack keeps a user's stop; one stopped task that never ends on its own is stopped by the
new agent; the runs nobody stopped end `done`. Before the fix, a job
that ended on its own before the stop reached it ended `done`, and so did its run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.db.models import Run
from reconciler.api.client import Client
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.web.serving import Running, running_server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
RUNS = 6
TASK = """type: task
name: {name}
commands:
  - touch {marks}/{name}.started
  - while [ ! -e {marks}/{name}.gate ]; do echo tick; sleep 0.2; done
  - touch {marks}/{name}.ended
resources:
  cpu: 1..
  memory: 0.1GB..
  disk: 0.1GB..
"""


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None  # the server's own SQLite in its data dir
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest.fixture
def server(tmp_path: Path, db: str | None) -> Iterator[Running]:
    overrides: dict[str, object] = {
        "local_job_user": "self",  # the tasks touch files in the test's temp dir
        "local_job_isolation": "process",
    }
    if db is not None:
        overrides["db"] = db
    with running_server(tmp_path, None, **overrides) as running:
        yield running


def _runs(running: Running) -> dict[str, Run]:
    store = running.server.store
    project = store.get_or_create_project("main")
    return {run.run_name: run for run in store.list_runs(project.id)}


def _agent_pid(running: Running) -> int:
    state = running.settings.data_dir / "local-agent" / "state.json"
    return int(json.loads(state.read_text())["pid"])


def test_a_stop_met_by_an_agent_kill_ends_the_runs_stopped(tmp_path: Path, server: Running) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    names = [f"tick-{i}" for i in range(RUNS)]
    stopped, others = names[: RUNS // 2], names[RUNS // 2 :]
    held = stopped.pop()  # stopped too, but never ends on its own: the new agent stops it
    api = Client(server.url, server.admin_token)
    try:
        api.apply("type: fleet\nname: local\nnodes: 1\n", "fleet.dstack.yml", force=True)
        for name in names:
            api.apply(TASK.format(name=name, marks=marks), f"{name}.dstack.yml", force=True)
        wait_until(lambda: all((marks / f"{n}.started").exists() for n in names), timeout=120,
                   what="every task to start")  # fmt: skip
        wait_until(lambda: all(r.status == "running" for r in _runs(server).values()),
                   timeout=60, what="every run to be recorded running")  # fmt: skip
        agent = _agent_pid(server)
        os.kill(agent, signal.SIGSTOP)  # its jobs run on; it tells nobody anything
        try:
            assert api.stop_runs([*stopped, held]) == []  # no warnings: unmanaged runs
            for name in stopped:  # they end on their own (exit 0) before the stop reaches them
                (marks / f"{name}.gate").touch()
            wait_until(lambda: all((marks / f"{n}.ended").exists() for n in stopped),
                       timeout=60, what="the stopped tasks to end on their own")  # fmt: skip
        finally:
            os.kill(agent, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent, signal.SIGCONT)
        for name in others:
            (marks / f"{name}.gate").touch()
        wait_until(lambda: all(r.status in ("done", "terminated", "failed")
                               for r in _runs(server).values()),
                   timeout=180, what="every run to end")  # fmt: skip
    finally:
        api.close()
    runs = _runs(server)
    store = server.server.store
    ended = {n: (runs[n].status, runs[n].termination_reason) for n in names}
    assert ended == {
        **{n: ("terminated", "stopped_by_user") for n in [*stopped, held]},
        **{n: ("done", "all_jobs_done") for n in others},
    }
    assert not (marks / f"{held}.ended").exists()  # the stop ended it, once its agent was back
    for name in [*stopped, held]:
        [job] = store.list_jobs(runs[name].id)
        assert (job.status, job.termination_reason) == ("terminated", "terminated_by_user")
