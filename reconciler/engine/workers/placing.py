"""Loading placement candidates from the store and taking/returning instance capacity.

The jobs worker calls `load_candidates` before the pure `reconciler.core.scheduling`
decision, then `take_capacity` to commit it: an atomic conditional UPDATE on the
instance's `busy_blocks`, so two workers (or two server processes) can never overfill an
instance. `return_capacity` gives the blocks back when the job ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Update, case, select, update

from reconciler.adapters.db.models import Fleet, Instance, Job, Run
from reconciler.adapters.db.store import Store
from reconciler.core.jobspecs import host_ports_of
from reconciler.core.scheduling import Candidate, Gpu
from reconciler.domain.statuses import InstanceStatus, JobStatus

ACTIVE_ON_INSTANCE = (
    JobStatus.PROVISIONING.value,
    JobStatus.PULLING.value,
    JobStatus.RUNNING.value,
    JobStatus.TERMINATING.value,
)


def _gpus(host_info: Mapping[str, Any]) -> tuple[Gpu, ...]:
    return tuple(
        Gpu(
            index=int(g.get("index", i)),
            name=str(g.get("name", "")),
            vendor=str(g.get("vendor", "")),
            memory_gb=float(g.get("memory_mib", 0)) / 1024,
        )
        for i, g in enumerate(host_info.get("gpus") or ())
    )


def to_candidate(
    instance: Instance,
    fleet: Fleet,
    busy_gpus: frozenset[int],
    busy_ports: frozenset[int] = frozenset(),
) -> Candidate | None:
    """The instance as the scheduler sees it; None until its host facts are known."""
    info = instance.host_info
    if not isinstance(info, Mapping):
        return None
    spec = fleet.spec if isinstance(fleet.spec, Mapping) else {}
    resources = instance.resources if isinstance(instance.resources, Mapping) else {}
    return Candidate(
        instance_id=instance.id,
        instance_name=instance.name,
        fleet_name=fleet.name,
        cpus=int(info.get("cpus", 0)),
        arch=str(info.get("arch", "x86_64")),
        memory_gb=float(info.get("memory_mib", 0)) / 1024,
        disk_gb=float(info.get("disk_mib", 0)) / 1024,
        gpus=_gpus(info),
        spot=bool(resources.get("spot", False)),
        price=float(instance.price or 0.0),
        total_blocks=instance.total_blocks,
        busy_blocks=instance.busy_blocks,
        busy_gpus=busy_gpus,
        busy_ports=busy_ports,
        cluster=spec.get("placement") == "cluster",
    )


def load_candidates(store: Store, project_id: str) -> list[Candidate]:
    """Every idle or busy instance of the project's fleets, with the GPUs in use."""
    fleets = {f.id: f for f in store.list_fleets(project_id)}
    statuses = [InstanceStatus.IDLE.value, InstanceStatus.BUSY.value]
    candidates = []
    for instance in store.list_instances(project_id=project_id, statuses=statuses):
        fleet = fleets.get(instance.fleet_id or "")
        if fleet is None:
            continue
        busy: set[int] = set()
        ports: set[int] = set()
        for job in store.list_jobs_on_instance(instance.id, statuses=ACTIVE_ON_INSTANCE):
            runtime = job.runtime if isinstance(job.runtime, Mapping) else {}
            busy.update(int(i) for i in runtime.get("gpus") or ())
            data = job.job_spec if isinstance(job.job_spec, Mapping) else {}
            ports.update(host_ports_of(data.get("spec") or {}))
        candidate = to_candidate(instance, fleet, frozenset(busy), frozenset(ports))
        if candidate is not None:
            candidates.append(candidate)
    return candidates


def take_capacity(store: Store, instance_id: str, blocks: int) -> bool:
    """Atomically add `blocks` to the instance's busy blocks if they still fit."""
    statement = (
        update(Instance)
        .where(
            Instance.id == instance_id,
            Instance.busy_blocks + blocks <= Instance.total_blocks,
            Instance.status.in_([InstanceStatus.IDLE.value, InstanceStatus.BUSY.value]),
        )
        .values(busy_blocks=Instance.busy_blocks + blocks, status=InstanceStatus.BUSY.value)
    )
    with store.writing() as session:
        return bool(session.execute(statement).rowcount)  # type: ignore[attr-defined]


def return_capacity_statement(instance_id: str, blocks: int, now: datetime) -> Update:
    """The UPDATE giving `blocks` back; the instance is idle again when nothing holds it.

    Executed in the same transaction as the job's final status (`JobsProcessor.write`),
    so a crash can neither leak the blocks nor give them back twice.
    """
    left = Instance.busy_blocks - blocks
    remaining = case((left > 0, left), else_=0)
    status = case(
        ((Instance.status == InstanceStatus.BUSY.value) & (left <= 0), InstanceStatus.IDLE.value),
        else_=Instance.status,
    )
    return (
        update(Instance)
        .where(Instance.id == instance_id)
        .values(busy_blocks=remaining, status=status, last_job_processed_at=now)
    )


def wake_waiting_statement(project_id: str, count: int) -> Update:
    """Make the `count` oldest jobs of the project waiting for capacity due now.

    Jobs that found no room sleep (`JobsConfig.wait_backoff`) instead of polling; blocks
    given back, or an instance that became ready, wake the oldest of them, first come
    first served, in the same transaction as the change that made room.
    """
    oldest = (
        select(Job.id)
        .join(Run, Run.id == Job.run_id)
        .where(
            Run.project_id == project_id,
            Job.status == JobStatus.SUBMITTED.value,
            Job.instance_id.is_(None),
            Job.due_at.is_not(None),
        )
        .order_by(Job.submitted_at, Job.id)
        .limit(count)
    )
    return update(Job).where(Job.id.in_(oldest)).values(due_at=None)


def wake_waiting(store: Store, project_id: str, count: int) -> None:
    """`wake_waiting_statement` in its own transaction (an instance became ready)."""
    with store.writing() as session:
        session.execute(wake_waiting_statement(project_id, count))


def return_capacity(store: Store, instance_id: str, blocks: int) -> None:
    """Give `blocks` back on their own (a placement that could not be completed)."""
    with store.writing() as session:
        session.execute(return_capacity_statement(instance_id, blocks, store.now()))
