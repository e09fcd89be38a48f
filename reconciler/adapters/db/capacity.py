"""The capacity workers' units of work: a fleet's instances, their termination, stops.

Called by the fleets worker (`reconciler.engine.workers.fleets`, `growing`), the stack
workers (`stacking`) and the runs worker (`run_jobs`). Each method is one transaction and
every status change is a compare-and-set, so a job placed meanwhile (which sets its
instance busy in `Store.record_job_step`) is never taken away:

- `sync_fleet_instances` upserts one instance per host a fleet's stack lists (by name)
  and terminates those no longer listed;
- `terminate_instances`, `keep_leaving_instances`, `finish_leaving_instances` move
  instances through `terminating` (the last one with its event);
- `confirm_resource_deleted` drops an inventory row once its deletion is confirmed;
- `waiting_job_runtimes` reads the project's submitted jobs for fleet growth;
- `stop_jobs` asks jobs to stop (a job never placed ends at once).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update

from reconciler.adapters.db.models import Event, Instance, Job, Resource, Run
from reconciler.adapters.db.sessions import StoreBase
from reconciler.core.transitions import job_status_for
from reconciler.domain.statuses import InstanceStatus, JobStatus, JobTerminationReason
from schemas.sshhosts import JumpHost

_LIVE = [s.value for s in InstanceStatus if s is not InstanceStatus.TERMINATED]
_UNFINISHED_ON_HOST = (
    JobStatus.PROVISIONING.value,
    JobStatus.PULLING.value,
    JobStatus.RUNNING.value,
    JobStatus.TERMINATING.value,
)
_STOPPABLE = (JobStatus.PROVISIONING.value, JobStatus.PULLING.value, JobStatus.RUNNING.value)


@dataclass(frozen=True, slots=True)
class HostRecord:
    """One instance of a fleet as its stack lists it: where its agent listens."""

    name: str
    hostname: str
    ssh_port: int
    ssh_user: str
    agent_port: int
    backend: str
    total_blocks: int = 1
    identity_file: str | None = None
    proxy_jump: JumpHost | None = None
    slurm: dict[str, Any] | None = None  # the Slurm allocation (cluster, job id, …)
    kubernetes: dict[str, Any] | None = None  # the pod (cluster, namespace, name, uid, …)

    @property
    def resources(self) -> dict[str, Any] | None:
        """What `instances.resources` holds of the host (`engine.agents.AgentDirectory`
        reads it back): its key and its jump host; a Slurm instance's allocation, a
        Kubernetes instance's pod."""
        found = host_resources(self.identity_file, self.proxy_jump)
        if self.slurm is not None:
            found = {**(found or {}), "slurm": self.slurm}
        if self.kubernetes is not None:
            found = {**(found or {}), "kubernetes": self.kubernetes}
        return found


def host_resources(identity_file: str | None, jump: JumpHost | None) -> dict[str, Any] | None:
    """An SSH host's key and jump host as `instances.resources` records them (None: none)."""
    found: dict[str, Any] = {}
    if identity_file:
        found["identity_file"] = identity_file
    if jump is not None:
        found["proxy_jump"] = jump.as_record()
    return found or None


class CapacityStore(StoreBase):
    """The `Store` part for fleets, instances and stops; see the module docstring."""

    def sync_fleet_instances(
        self, fleet_id: str, project_id: str, hosts: Sequence[HostRecord]
    ) -> int:
        """Upsert the hosts' instances, terminate the unlisted; how many rows changed."""
        now = self.now()
        changed = 0
        with self.writing() as session:
            existing = {
                i.name: i
                for i in session.scalars(
                    select(Instance).where(
                        Instance.fleet_id == fleet_id, Instance.status.in_(_LIVE)
                    )
                )
            }
            for num, host in enumerate(hosts):
                row = existing.pop(host.name, None)
                where = (host.hostname, host.ssh_port, host.ssh_user, host.agent_port)
                if row is not None:
                    if (row.hostname, row.ssh_port, row.ssh_user, row.agent_port) != where:
                        row.hostname, row.ssh_port, row.ssh_user, row.agent_port = where
                        row.due_at, changed = None, changed + 1
                    continue
                session.add(_new_instance(fleet_id, project_id, num, host, now))
                changed += 1
            for gone in existing.values():
                gone.status, gone.termination_reason, gone.due_at = (
                    InstanceStatus.TERMINATING.value,
                    "terminated_by_user",
                    None,
                )
                changed += 1
        return changed

    def terminate_instances(
        self, instance_ids: Iterable[str], reason: str, *, from_statuses: Collection[str]
    ) -> None:
        """Mark the instances `terminating` if still in one of `from_statuses`."""
        with self.writing() as session:
            for instance_id in instance_ids:
                session.execute(
                    update(Instance)
                    .where(Instance.id == instance_id, Instance.status.in_(list(from_statuses)))
                    .values(
                        status=InstanceStatus.TERMINATING.value,
                        termination_reason=reason,
                        due_at=None,
                    )
                )

    def keep_leaving_instances(self, instance_ids: Iterable[str], reason: str) -> None:
        """Take back the termination (for `reason`) of instances the stack keeps."""
        with self.writing() as session:
            for instance_id in instance_ids:
                session.execute(
                    update(Instance)
                    .where(
                        Instance.id == instance_id,
                        Instance.status == InstanceStatus.TERMINATING.value,
                        Instance.termination_reason == reason,
                    )
                    .values(status=InstanceStatus.IDLE.value, termination_reason=None)
                )

    def finish_leaving_instances(self, instance_ids: Iterable[str]) -> set[str]:
        """Mark `terminating` instances `terminated`, each with its event; the ids changed."""
        done: set[str] = set()
        now = self.now()
        with self.writing() as session:
            for instance_id in instance_ids:
                row = session.get(Instance, instance_id)
                if row is None or row.status != InstanceStatus.TERMINATING.value:
                    continue
                row.status, row.due_at = InstanceStatus.TERMINATED.value, None
                done.add(row.id)
                session.add(
                    Event(
                        project_id=row.project_id,
                        target_type="instance",
                        target_id=row.id,
                        target_name=row.name,
                        message=f"instance {row.name} terminated ({row.termination_reason})",
                        created_at=now,
                    )
                )
        return done

    def confirm_resource_deleted(self, resource_id: str, deleting_status: str) -> None:
        """Drop the inventory row once its deletion is confirmed (only while deleting)."""
        with self.writing() as session:
            resource = session.get(Resource, resource_id)
            if (
                resource is not None
                and resource.deleted_at is None
                and resource.status == deleting_status
            ):
                now = self.now()
                resource.deleted_at, resource.updated_at = now, now

    def end_cluster_instance(
        self, instance_id: str, reason: JobTerminationReason, message: str
    ) -> list[str]:
        """The cluster ended the instance's allocation: the instance is `terminated`
        (dstack's instance reason `error`, `message` saying why) and every unfinished job
        on it ends with `reason` at once, in one transaction (nothing
        of theirs runs any more: their agent ran inside the allocation). The jobs ended."""
        now = self.now()
        with self.writing() as session:
            row = session.get(Instance, instance_id)
            if row is None or row.status == InstanceStatus.TERMINATED.value:
                return []
            row.status, row.termination_reason = InstanceStatus.TERMINATED.value, "error"
            row.status_message, row.busy_blocks, row.due_at = message[:500], 0, None
            ended = list(
                session.scalars(
                    select(Job).where(
                        Job.instance_id == instance_id, Job.status.in_(_UNFINISHED_ON_HOST)
                    )
                )
            )
            for job in ended:
                job.status, job.termination_reason = job_status_for(reason).value, reason.value
                job.status_message, job.finished_at, job.due_at = message[:500], now, None
            return [job.id for job in ended]

    def waiting_job_runtimes(self, project_id: str) -> list[tuple[str, Any, str]]:
        """(job id, runtime, run name) of every submitted job of the project."""
        query = (
            select(Job.id, Job.runtime, Run.run_name)
            .join(Run, Job.run_id == Run.id)
            .where(Run.project_id == project_id, Job.status == JobStatus.SUBMITTED.value)
        )
        with self.reading() as session:
            return [(str(i), runtime, str(name)) for i, runtime, name in session.execute(query)]

    def stop_jobs(self, jobs: Iterable[tuple[str, str]], reason: JobTerminationReason) -> int:
        """Ask the (job id, status read) jobs to stop; a submitted one ends at once (it
        was never placed). Compare-and-set on the status; returns how many changed."""
        changed = 0
        now = self.now()
        with self.writing() as session:
            for job_id, status in jobs:
                values: dict[str, Any]
                if status == JobStatus.SUBMITTED.value:
                    values = {
                        "status": job_status_for(reason).value,
                        "termination_reason": reason.value,
                        "finished_at": now,
                        "due_at": None,
                    }
                    allowed: tuple[str, ...] = (JobStatus.SUBMITTED.value,)
                else:
                    values = {
                        "status": JobStatus.TERMINATING.value,
                        "termination_reason": reason.value,
                        "due_at": None,
                    }
                    allowed = _STOPPABLE
                statement = (
                    update(Job).where(Job.id == job_id, Job.status.in_(allowed)).values(**values)
                )
                changed += int(session.execute(statement).rowcount)  # type: ignore[attr-defined]
        return changed


def _new_instance(fleet_id: str, project_id: str, num: int, host: HostRecord, now: Any) -> Instance:
    return Instance(
        fleet_id=fleet_id,
        project_id=project_id,
        name=host.name,
        instance_num=num,
        status=InstanceStatus.PENDING.value,
        created_at=now,
        hostname=host.hostname,
        ssh_port=host.ssh_port,
        ssh_user=host.ssh_user,
        agent_port=host.agent_port,
        backend=host.backend,
        total_blocks=host.total_blocks,
        resources=host.resources,
    )
