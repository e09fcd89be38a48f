"""A task run with one job follows that job in the job's own write: what it becomes.

A task of one node, not scheduled, changes status only when its one job does, and what it
changes to is `runflow.step_run`'s answer for that job. The jobs worker asks `follow_run`
when it writes a job's new status: the answer (the run's values and status events, the
same the runs worker would write on its next pass) goes into the job's transaction, fenced
by the run's status read, so the run needs no pass of its own (`Store.record_job_step`).
`None` — another kind of run, a retry, anything that submits or stops jobs — leaves the run
to the runs worker, made due as before; no values: the run stays as it is. Pure: called
by `reconciler.engine.workers.jobs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.core.jobspecs import expand_jobs
from reconciler.core.runflow import JobView, RunView, step_run
from reconciler.core.transitions import run_status_for, stopped_run_reason
from reconciler.domain.statuses import RunStatus

_FOLLOWED = frozenset({RunStatus.SUBMITTED, RunStatus.PROVISIONING, RunStatus.RUNNING})


@dataclass(frozen=True, slots=True)
class RunFollow:
    """The run's new values and its status-change messages, in order."""

    values: Mapping[str, Any]
    events: tuple[str, ...]


def follows_its_job(run: RunView) -> bool:
    """Whether the run is a one-job task whose status its job's writes can carry."""
    spec = run.spec
    return (
        run.run_type == "task"
        and run.status in _FOLLOWED
        and not spec.get("schedule")
        and len(expand_jobs(spec)) == 1
    )


def follow_run(run: RunView, job: JobView, *, now: float) -> RunFollow | None:
    """What the run becomes now that its only job is `job`: no values when nothing changes;
    None when the runs worker decides (made due)."""
    if not follows_its_job(run):
        return None
    step = step_run(run, [job], now=now)
    if step.submit_replicas or step.stop or step.wait_until is not None or step.message:
        return None
    if step.status is None or step.status is run.status:
        return RunFollow({}, ())
    if step.status is not RunStatus.TERMINATING or step.reason is None:
        return RunFollow({"status": step.status.value}, (_message(run.status, step.status),))
    # The job ended: terminating and the run's end in one write (two events), as the runs
    # worker does when nothing is left to stop.
    ended = stopped_run_reason(step.reason, [job.status])
    final = run_status_for(ended)
    values = {"status": final.value, "termination_reason": ended.value}
    first = _message(run.status, RunStatus.TERMINATING, step.reason.value)
    then = _message(RunStatus.TERMINATING, final, ended.value if ended is not step.reason else "")
    return RunFollow(values, (first, then))


def _message(before: RunStatus, after: RunStatus, reason: str = "") -> str:
    return f"run status {before.value} -> {after.value}" + (f" ({reason})" if reason else "")
