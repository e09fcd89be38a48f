"""Tasks on the real local agent: run to done with logs, failures, retry, max_duration, stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.db.models import Run
from reconciler.core.hostblocks import block_size
from tests.e2e.runs_harness import AgentEnv, Harness, close_harness, make_harness

pytestmark = pytest.mark.timeout(120)


def _status(h: Harness, run: Run) -> str:
    return h.run(run.id).status


async def test_task_runs_to_done_with_logs_and_dstack_env(h: Harness) -> None:
    run = h.submit(
        """
type: task
name: hello
commands:
  - echo "hello from $DSTACK_RUN_NAME rank=$DSTACK_NODE_RANK nodes=$DSTACK_NODES_NUM"
  - printf 'bytes:\\377\\n'
env:
  - GREETING=hi
"""
    )
    await h.until(lambda: _status(h, run) == "done")
    [job] = h.jobs_of(run.id)
    assert job.status == "done"
    assert job.termination_reason == "done_by_runner"
    assert job.exit_status == 0
    text = h.log_text(run)
    assert "hello from hello rank=0 nodes=1" in text
    assert "bytes:" in text
    assert h.run(run.id).termination_reason == "all_jobs_done"
    # capacity was given back
    instance = h.store.get(type(h.instance), h.instance.id)
    assert instance is not None
    assert instance.busy_blocks == 0


async def test_failed_task_fails_run_without_retry(h: Harness) -> None:
    run = h.submit("type: task\nname: boom\ncommands: ['echo going down', 'exit 3']\n")
    await h.until(lambda: _status(h, run) == "failed")
    [job] = h.jobs_of(run.id)
    assert job.termination_reason == "container_exited_with_error"
    assert job.exit_status == 3
    assert h.run(run.id).termination_reason == "job_failed"
    assert "going down" in h.log_text(run)


async def test_retry_on_error_resubmits(h: Harness) -> None:
    marker = h.data_dir / "marker"
    run = h.submit(
        f"""
type: task
name: flaky
retry:
  on_events: [error]
  duration: 1h
commands:
  - if [ -f {marker} ]; then echo second; else touch {marker}; echo first; exit 1; fi
"""
    )
    await h.until(lambda: _status(h, run) == "pending")
    assert h.jobs_of(run.id)[0].status == "failed"
    assert "retrying after container_exited_with_error" in h.run(run.id).status_message
    # skip the 15 s back-off: make the run due now
    h.store.update(Run, run.id, next_triggered_at=None, due_at=None)
    await h.until(lambda: _status(h, run) == "done", within=60)
    jobs = h.jobs_of(run.id)
    assert [j.submission_num for j in jobs] == [0, 1]
    assert [j.status for j in jobs] == ["failed", "done"]


async def test_max_duration_terminates(h: Harness) -> None:
    run = h.submit("type: task\nname: long\nmax_duration: 1\ncommands: ['sleep 600']\n")
    # dstack: a job ended by max_duration is terminated; its run ends failed (job_failed)
    await h.until(lambda: _status(h, run) == "failed", within=60)
    [job] = h.jobs_of(run.id)
    assert job.termination_reason == "max_duration_exceeded"
    assert job.status == "terminated"


async def test_stop_by_user(h: Harness) -> None:
    run = h.submit("type: task\nname: sleeper\nstop_duration: 2\ncommands: ['sleep 600']\n")
    await h.until(lambda: _status(h, run) == "running")
    h.store.update(
        Run, run.id, status="terminating", termination_reason="stopped_by_user", due_at=None
    )
    await h.until(lambda: _status(h, run) == "terminated", within=60)
    [job] = h.jobs_of(run.id)
    assert job.termination_reason == "terminated_by_user"


async def test_no_capacity_names_the_requirement(h: Harness) -> None:
    run = h.submit("type: task\nname: gpu\nresources:\n  gpu: H100:8\ncommands: ['true']\n")
    await h.until(lambda: _status(h, run) == "failed")
    [job] = h.jobs_of(run.id)
    assert job.termination_reason == "failed_to_start_due_to_no_capacity"
    assert "gpu" in job.status_message and "H100" in job.status_message


async def test_dev_environment_runs_init_and_stays_up(h: Harness) -> None:
    run = h.submit("type: dev-environment\nname: dev\nide: vscode\ninit:\n  - echo initialized\n")
    await h.until(lambda: _status(h, run) == "running" and "initialized" in h.log_text(run))
    [job] = h.jobs_of(run.id)
    assert job.status == "running"
    h.store.update(
        Run, run.id, status="terminating", termination_reason="stopped_by_user", due_at=None
    )
    await h.until(lambda: _status(h, run) == "terminated")


async def test_dev_environment_stopped_outside_is_started_again(h: Harness) -> None:
    run = h.submit("type: dev-environment\nname: devheal\nide: vscode\n")
    await h.until(lambda: _status(h, run) == "running")
    [job] = h.jobs_of(run.id)
    # someone stops it on the host, behind Dockyard's back
    client = h.agents.client(h.instance)
    await client.stop(job.agent_job_id or job.id, grace=0, force=True)
    await h.until(lambda: len(h.jobs_of(run.id)) == 2 and h.jobs_of(run.id)[1].status == "running")
    first, second = h.jobs_of(run.id)
    assert first.termination_reason == "terminated_by_server"
    assert second.submission_num == 1
    h.store.update(
        Run, run.id, status="terminating", termination_reason="stopped_by_user", due_at=None
    )
    await h.until(lambda: _status(h, run) == "terminated")


async def test_a_job_waiting_for_room_is_woken_when_blocks_come_back(
    tmp_path: Path, agent_env: AgentEnv
) -> None:
    # The backoff is an hour: the second task can only run if the first one's end wakes it.
    h = await make_harness(tmp_path, agent_env, total_blocks=1, wait_backoff=3600.0)
    try:
        gate = tmp_path / "go"
        first = h.submit(
            f"type: task\nname: first\ncommands:\n  - while [ ! -e {gate} ]; do sleep 0.1; done\n"
        )
        await h.until(lambda: _status(h, first) == "running")
        second = h.submit("type: task\nname: second\ncommands: ['echo second ran']\n")

        def sleeping() -> bool:
            jobs = h.jobs_of(second.id)
            return bool(jobs) and jobs[0].due_at is not None and "busy" in jobs[0].status_message

        await h.until(sleeping)
        gate.write_text("go")
        await h.until(lambda: _status(h, second) == "done")
        assert "second ran" in h.log_text(second)
    finally:
        await close_harness(h)


async def test_blocks_given_back_wake_a_small_job_behind_a_big_one(
    tmp_path: Path, agent_env: AgentEnv
) -> None:
    """Head-of-line: two one-block tasks fill the host, a two-block task waits, a
    one-block task waits behind it. When one block comes back, the small task runs at
    once; the big one, first in line, waits for its two (the back-off is an hour)."""
    h = await make_harness(tmp_path, agent_env, total_blocks=2, wait_backoff=3600.0)
    try:
        block_gb = block_size(h.instance.host_info, 2).memory_gb
        small = "resources:\n  cpu: 0..\n  memory: 0.01GB..\n"
        gates = [tmp_path / "go-0", tmp_path / "go-1"]
        holders = [
            h.submit(
                f"type: task\nname: hold-{i}\n{small}"
                f"commands:\n  - while [ ! -e {gate} ]; do sleep 0.1; done\n"
            )
            for i, gate in enumerate(gates)
        ]
        await h.until(lambda: all(_status(h, r) == "running" for r in holders))
        big = h.submit(
            f"type: task\nname: big\nresources:\n  cpu: 0..\n  memory: {block_gb + 0.5:.1f}GB..\n"
            "commands: ['echo big ran']\n"
        )
        await h.until(lambda: _sleeping(h, big))
        late = h.submit(f"type: task\nname: late\n{small}commands: ['echo late ran']\n")
        await h.until(lambda: _sleeping(h, late))
        gates[0].write_text("go")
        await h.until(lambda: _status(h, late) == "done")
        assert _status(h, big) == "submitted" and "late ran" in h.log_text(late)
        gates[1].write_text("go")
        await h.until(lambda: _status(h, big) == "done")
    finally:
        await close_harness(h)


def _sleeping(h: Harness, run: Run) -> bool:
    jobs = h.jobs_of(run.id)
    return bool(jobs) and jobs[0].due_at is not None and "busy" in jobs[0].status_message


async def test_one_job_without_room_parks_the_new_jobs_like_it(
    tmp_path: Path, agent_env: AgentEnv
) -> None:
    """A queue of alike tasks behind a full host costs one jobs-worker pass, not one each:
    the first that finds no room parks the others in the line in its write (they are never
    claimed), and blocks given back run them first come first served."""
    h = await make_harness(tmp_path, agent_env, total_blocks=1, wait_backoff=3600.0)
    try:
        gate = tmp_path / "go"
        holder = h.submit(
            f"type: task\nname: holder\ncommands:\n  - while [ ! -e {gate} ]; do sleep 0.1; done\n"
        )
        await h.until(lambda: _status(h, holder) == "running")
        queue = [
            h.submit(f"type: task\nname: q{i}\ncommands: ['echo q{i} ran']\n") for i in range(4)
        ]
        while not all(h.jobs_of(run.id) for run in queue):  # the runs worker makes the jobs
            assert await h.runs.process_once(), h.describe()
        assert await h.jobs.process_once(limit=1) == 1  # one job's pass
        assert all(_sleeping(h, run) for run in queue), h.describe()
        gate.write_text("go")
        await h.until(lambda: all(_status(h, run) == "done" for run in queue), within=60)
        jobs = sorted((h.jobs_of(run.id)[0] for run in queue), key=lambda j: j.submitted_at)
        ends = [job.finished_at for job in jobs]
        assert ends == sorted(ends)  # first come first served
    finally:
        await close_harness(h)
