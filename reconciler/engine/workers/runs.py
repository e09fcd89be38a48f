"""The runs worker: keeps each active run's jobs in line with its spec.

For each leased run it loads the run and its jobs, asks the pure `reconciler.core.runflow`
what to do (submit replicas, stop jobs, change status, wait), and writes that: the run
fenced by its lease and by the status it read, jobs by compare-and-set on their status
(`run_jobs`). Pending runs wait for their retry back-off or `schedule`; terminating runs
stop their jobs and end with the status their reason maps to. Services scale on the
proxy's request rate (`autoscaling`) when `scaling` is set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from apscheduler.triggers.cron import CronTrigger

from reconciler.adapters.db.runsteps import RunWrite
from reconciler.adapters.db.store import Store
from reconciler.core.autoscaling import ScalingPolicy, desired_replicas
from reconciler.core.jobspecs import expand_jobs
from reconciler.core.runflow import RunStep, step_run
from reconciler.core.transitions import run_status_for, stopped_run_reason
from reconciler.domain.statuses import (
    JobStatus,
    RunStatus,
    RunTerminationReason,
)
from reconciler.domain.workloads import JobRecord, RunRecord
from reconciler.engine.service_stats import RequestStats
from reconciler.engine.worker import RELEASED, Process, WorkerConfig
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.run_jobs import (
    job_reason_for,
    job_view,
    run_view,
    stop_jobs,
    submit_job,
)
from reconciler.ports import WorkKind

RR = RunTerminationReason


def next_cron_fire(spec: Mapping[str, Any], now: float) -> float | None:
    """The next time a scheduled run starts (UTC cron), or None without `schedule`."""
    schedule = spec.get("schedule")
    if not isinstance(schedule, Mapping):
        return None
    crons = schedule.get("cron")
    exprs = [crons] if isinstance(crons, str) else list(crons or ())
    moment = datetime.fromtimestamp(now, UTC)
    fires = [
        fire.timestamp()
        for expr in exprs
        if (fire := CronTrigger.from_crontab(expr, timezone=UTC).get_next_fire_time(None, moment))
    ]
    return min(fires) if fires else None


class RunsProcessor:
    """The worker callback for runs; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        hint: Callable[[WorkKind], None],
        stats: RequestStats | None = None,
        poll: float = 2.0,
        idle: float = 600.0,
    ) -> None:
        self.store = store
        self._hint = hint
        self._stats = stats
        self._poll = poll
        self._idle = idle
        self._scaled: dict[str, tuple[int, float]] = {}  # run id -> (replicas, when)

    async def process(self, run_id: str, token: str) -> float | None:
        due, touched_jobs = await self.store.in_lane(self._step, run_id, token)
        if touched_jobs:
            self._hint("jobs")
        return due

    def _now(self) -> float:
        return self.store.clock.now_ts()

    def _step(self, run_id: str, token: str) -> tuple[float | None, bool]:
        rows = self.store.load_run_rows(run_id, token)  # one read transaction
        if rows is None:
            return None, False
        run, jobs = rows
        status = RunStatus(run.status)
        if status is RunStatus.PENDING:
            return self._pending(run, jobs, token)
        if status is RunStatus.TERMINATING:
            return self._terminating(run, jobs, token)
        step = step_run(
            run_view(run),
            [job_view(j) for j in jobs],
            now=self._now(),
            desired=self._desired(run, jobs),
        )
        return self._apply(run, jobs, token, step)

    # -- pending ----------------------------------------------------------------------------

    def _pending(
        self, run: RunRecord, jobs: list[JobRecord], token: str
    ) -> tuple[float | None, bool]:
        now = self._now()
        due_at = run.next_triggered_at.timestamp() if run.next_triggered_at else None
        if due_at is None and not jobs:
            due_at = next_cron_fire(run.spec, now)
            if due_at is not None:
                due = max(0.0, due_at - now)
                values = {"next_triggered_at": _dt(due_at), "status_message": "scheduled"}
                return self._write_run(run, token, values, due), False
        if due_at is not None and due_at > now:
            return min(due_at - now, 60.0), False
        submission = max((j.submission_num for j in jobs), default=-1) + 1
        for replica in range(self._desired(run, jobs) or 1):
            self._submit_replica(run, replica, submission)
        values = {"status": RunStatus.SUBMITTED.value, "next_triggered_at": None}
        return self._write_run(run, token, values, self._poll), True

    # -- terminating ------------------------------------------------------------------------

    def _terminating(
        self, run: RunRecord, jobs: list[JobRecord], token: str
    ) -> tuple[float | None, bool]:
        reason = RR(run.termination_reason or RR.STOPPED_BY_USER.value)
        active = [j for j in jobs if not JobStatus(j.status).is_finished()]
        if active:
            changed = stop_jobs(self.store, active, job_reason_for(reason))
            return self._poll, changed > 0
        values = self._ended(run, reason, jobs)
        return self._write_run(run, token, values, CONFIG.min_interval), False

    def _ended(self, run: RunRecord, reason: RR, jobs: list[JobRecord]) -> dict[str, Any]:
        """The values that end a terminating run whose jobs have all finished (a scheduled
        run waits for its next start instead)."""
        ended = stopped_run_reason(reason, _latest_statuses(jobs))
        values: dict[str, Any] = {"status": run_status_for(ended).value}
        if ended is not reason:
            values["termination_reason"] = ended.value
        fire = None
        if reason not in (RR.STOPPED_BY_USER, RR.ABORTED_BY_USER):
            fire = next_cron_fire(run.spec, self._now())
        if fire is not None:
            values = {
                "status": RunStatus.PENDING.value,
                "next_triggered_at": _dt(fire),
                "termination_reason": None,
            }
        return values

    # -- active -----------------------------------------------------------------------------

    def _apply(
        self, run: RunRecord, jobs: list[JobRecord], token: str, step: RunStep
    ) -> tuple[float | None, bool]:
        touched = False
        if step.stop:
            by_id = {j.id: j for j in jobs}
            for job_id, reason in step.stop:
                if job_id in by_id:
                    touched |= stop_jobs(self.store, [by_id[job_id]], reason) > 0
        for replica in step.submit_replicas:
            previous = [j.submission_num for j in jobs if j.replica_num == replica]
            self._submit_replica(run, replica, max(previous, default=-1) + 1)
            touched = True
        values: dict[str, Any] = {}
        if step.status is not None and step.status.value != run.status:
            values["status"] = step.status.value
        if step.reason is not None:
            values["termination_reason"] = step.reason.value
        if step.message is not None and step.message != run.status_message:
            values["status_message"] = step.message
        if step.wait_until is not None:
            values["next_triggered_at"] = _dt(step.wait_until)
        terminating = values.get("status") == RunStatus.TERMINATING.value
        if terminating and step.reason is not None and _all_finished(jobs):
            # Nothing left to stop: terminating and the run's end in one write (two events).
            ended = self._ended(run, step.reason, jobs)
            return self._write_run(run, token, values, CONFIG.min_interval, ended), touched
        due = 0.0 if terminating else self._next_pass(run, step.wait_until)
        if values:
            return self._write_run(run, token, values, due), touched
        return due, touched

    def _next_pass(self, run: RunRecord, wait_until: float | None) -> float:
        """An active run is woken by its jobs' status changes (`make_due` with the job's
        write); it is looked at on its own only for what time decides: autoscaling, a retry
        delay, and at `idle` as a safety net."""
        scaling = run.spec.get("type") == "service" and bool(run.spec.get("scaling"))
        due = self._poll if scaling else self._idle
        if wait_until is not None:
            due = min(due, max(0.0, wait_until - self._now()))
        return due

    def _submit_replica(self, run: RunRecord, replica: int, submission: int) -> None:
        slots = [s for s in expand_jobs(run.spec, replicas=replica + 1) if s.replica_num == replica]
        if not slots:
            template = expand_jobs(run.spec, replicas=1)[0]
            slots = [replace(template, replica_num=replica)]
        for slot in slots:
            submit_job(
                self.store, run, slot, submission_num=submission, deployment_num=run.deployment_num
            )

    def _desired(self, run: RunRecord, jobs: list[JobRecord]) -> int | None:
        spec = run.spec
        if spec.get("type") != "service":
            return None
        if spec.get("groups"):
            return len({s.replica_num for s in expand_jobs(spec)})
        replicas = spec.get("replicas")
        base = len(expand_jobs(spec))
        scaling = spec.get("scaling")
        if not (isinstance(scaling, Mapping) and isinstance(replicas, Mapping) and self._stats):
            return base
        policy = ScalingPolicy(
            min_replicas=int(replicas.get("min") or 0),
            max_replicas=int(replicas.get("max") or base),
            target_rps=float(scaling.get("target") or 1),
            scale_up_delay=_seconds(scaling.get("scale_up_delay"), 300),
            scale_down_delay=_seconds(scaling.get("scale_down_delay"), 600),
        )
        now = self._now()
        current, since = self._scaled.get(run.id, (base, now))
        project = self.store.project_name(run.project_id) or ""
        window = float(scaling.get("window") or 60)
        rps = self._stats.rps(project, run.run_name, window=window)
        wanted = desired_replicas(policy, current=current, rps=rps, now=now, last_scaled_at=since)
        self._scaled[run.id] = (wanted, now if wanted != current else since)
        return wanted

    def _write_run(
        self,
        run: RunRecord,
        token: str,
        values: Mapping[str, Any],
        due: float,
        then: Mapping[str, Any] | None = None,
    ) -> float:
        """Fenced by the lease and by the status read (a stop from the API always wins);
        the status events and the lease (due again in `due` s) go in the same transaction
        (`Store.record_run_write`); `then`: values written over `values` at once, as the
        next pass would (its event follows). `RELEASED` if written, else `due`."""
        events = []
        status = run.status
        for step in (values, then or {}):
            new_status = step.get("status")
            if new_status and new_status != status:
                reason = step.get("termination_reason")
                message = f"run status {status} -> {new_status}" + (
                    f" ({reason})" if reason else ""
                )
                events.append((run.run_name, message))
                status = new_status
        write = RunWrite(
            run_id=run.id,
            token=token,
            read_status=run.status,
            project_id=run.project_id,
            values={**values, **(then or {})},
            events=tuple(events),
            release_lease=due,
        )
        return RELEASED if self.store.record_run_write(write) else due


def _all_finished(jobs: list[JobRecord]) -> bool:
    return all(JobStatus(j.status).is_finished() for j in jobs)


def _latest_statuses(jobs: list[JobRecord]) -> list[JobStatus]:
    """The status of each job slot's latest submission."""
    latest: dict[tuple[int, int], JobRecord] = {}
    for job in jobs:
        key = (job.replica_num, job.job_num)
        if key not in latest or job.submission_num > latest[key].submission_num:
            latest[key] = job
    return [JobStatus(j.status) for j in latest.values()]


def _seconds(value: Any, default: float) -> float:
    """A duration from the spec; 0 is a real value (`scale_up_delay: 0s`), None the default."""
    return default if value is None else float(value)


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


CONFIG = WorkerConfig(
    kind="runs",
    concurrency=20,
    lease_seconds=30.0,
    min_interval=5.0,
)


def make_process(deps: WorkerDeps, *, stats: RequestStats | None = None) -> Process:
    """The runs worker callback (see `reconciler.engine.workers`)."""
    return RunsProcessor(store=deps.store, hint=deps.hint, stats=stats).process
