"""Runs and jobs as dstack 0.22.5's Run JSON, read from the runs/jobs tables.

`to_run` assembles one `Run`: its `run_spec` (the stored configuration plus its path),
`jobs[]` grouped by (replica, job) with every submission, `latest_job_submission`, the
fleet of its first placed job, the cost so far, and for services `service.url` (the
built-in proxy path) and `service.model.base_url` (`…/v1`) when `model` is set.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Fleet, Instance, Job, Resource, Run
from reconciler.adapters.db.records import instance_record
from reconciler.api import models as wire
from reconciler.core.dstack_wire import job_spec, provisioning_data
from reconciler.core.jobspecs import container_ports
from reconciler.domain.inventory import AgentHost, InstanceRecord
from reconciler.domain.joblogs import JobRef
from reconciler.errors import InvalidError, NotFoundError

FINISHED_RUN = ("terminated", "failed", "done")
FINISHED_JOB = ("terminated", "aborted", "failed", "done")


def user_of(origin: str | None) -> str:
    """`cli:<user>` → user; git-managed runs belong to `gitops`."""
    if origin and origin.startswith("cli:"):
        return origin.removeprefix("cli:")
    return "gitops"


def _provisioning(instance: Instance | None) -> dict[str, Any] | None:
    if instance is None:
        return None
    return provisioning_data(
        {
            "instance_id": instance.id,
            "instance_name": instance.name,
            "hostname": instance.hostname,
            "ssh_port": instance.ssh_port,
            "ssh_user": instance.ssh_user,
            "backend": instance.backend,
            "region": instance.region,
            "instance_type": instance.instance_type,
            "price": instance.price,
            "resources": instance.resources,
        }
    )


def _submission(job: Job, instance: Instance | None) -> wire.JobSubmission:
    return wire.JobSubmission(
        id=job.id,
        submission_num=job.submission_num,
        deployment_num=job.deployment_num,
        submitted_at=job.submitted_at,
        last_processed_at=job.last_processed_at or job.submitted_at,
        finished_at=job.finished_at,
        status=job.status,
        status_message=job.status_message or job.status,
        termination_reason=job.termination_reason,
        exit_status=job.exit_status,
        job_provisioning_data=_provisioning(instance),
        replica_num=job.replica_num,
        job_num=job.job_num,
    )


def _cost(job: Job, instance: Instance | None, now: datetime) -> float:
    if instance is None or not instance.price or job.status in ("submitted",):
        return 0.0
    end = job.finished_at or now
    return max(0.0, (end - job.submitted_at).total_seconds()) / 3600 * instance.price


def _configuration(spec: Any) -> dict[str, Any]:
    if isinstance(spec, dict) and isinstance(spec.get("configuration"), dict):
        return dict(spec["configuration"])
    return dict(spec) if isinstance(spec, dict) else {}


def _service(project: str, run: Run, configuration: dict[str, Any]) -> wire.ServiceInfo | None:
    if run.run_type != "service":
        return None
    url = f"/proxy/services/{project}/{run.run_name}/"
    model = configuration.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    if not isinstance(name, str):
        return wire.ServiceInfo(url=url)
    kind = model.get("type", "chat") if isinstance(model, dict) else "chat"
    return wire.ServiceInfo(
        url=url, model=wire.ServiceModel(name=name, base_url=url + "v1", type=kind)
    )


def to_run(session: Session, project: str, run: Run, now: datetime) -> wire.Run:
    resource = session.get(Resource, run.resource_id) if run.resource_id else None
    rows = session.execute(
        select(Job, Instance)
        .outerjoin(Instance, Instance.id == Job.instance_id)
        .where(Job.run_id == run.id)
        .order_by(Job.replica_num, Job.job_num, Job.submission_num)
    ).all()
    groups: dict[tuple[int, int], list[tuple[Job, Instance | None]]] = defaultdict(list)
    for job, instance in rows:
        groups[(job.replica_num, job.job_num)].append((job, instance))
    configuration = _configuration(run.spec)
    per_replica = 1 + max((job for _, job in groups), default=0)
    jobs = [
        wire.JobInfo(
            job_spec=job_spec(
                configuration,
                run_name=run.run_name,
                replica_num=replica,
                job_num=job,
                jobs_per_replica=per_replica,
                stored=subs[-1][0].job_spec,
            ),
            job_submissions=[_submission(j, i) for j, i in subs],
        )
        for (replica, job), subs in sorted(groups.items())
    ]
    first = groups[min(groups)] if groups else []
    fleet_row = session.get(Fleet, first[-1][1].fleet_id) if first and first[-1][1] else None
    return wire.Run(
        id=run.id,
        project_name=project,
        user=user_of(resource.origin if resource else None),
        fleet={"id": fleet_row.id, "name": fleet_row.name} if fleet_row else None,
        submitted_at=run.submitted_at,
        last_processed_at=run.last_processed_at or run.submitted_at,
        status=run.status,
        status_message=run.status_message or run.status,
        termination_reason=run.termination_reason,
        run_spec=_run_spec(run, configuration, resource),
        jobs=jobs,
        latest_job_submission=jobs[0].job_submissions[-1] if jobs else None,
        cost=round(sum(_cost(j, i, now) for j, i in rows), 6),
        service=_service(project, run, configuration),
        deployment_num=run.deployment_num,
        error=run.termination_reason if run.status == "failed" else None,
        deleted=run.deleted,
        next_triggered_at=run.next_triggered_at,
        origin=resource.origin if resource else None,
    )


def _run_spec(run: Run, configuration: dict[str, Any], resource: Resource | None) -> dict[str, Any]:
    return {
        "run_name": run.run_name,
        "repo_id": None,
        "repo_data": None,
        "repo_code_hash": None,
        "repo_dir": None,
        "file_archives": [],
        "working_dir": configuration.get("working_dir"),
        "configuration_path": resource.path if resource else None,
        "configuration": configuration,
        "profile": None,
        "ssh_key_pub": None,
    }


def find_run(session: Session, project_id: str, run_name: str) -> Run:
    run = session.scalar(
        select(Run)
        .where(Run.project_id == project_id, Run.run_name == run_name, Run.deleted.is_(False))
        .order_by(Run.submitted_at.desc())
        .limit(1)
    )
    if run is None:
        raise NotFoundError(f"run {run_name} not found")
    return run


def get_run(
    session: Session, project_id: str, project: str, run_name: str, now: datetime
) -> wire.Run:
    return to_run(session, project, find_run(session, project_id, run_name), now)


def get_run_by_id(
    session: Session, project_id: str, project: str, run_id: str, now: datetime
) -> wire.Run:
    """The project's run `run_id` itself (dstack's `runs/get` by id), not the newest run of
    its name: a resubmitted name keeps each submission's own answer."""
    run = session.scalar(select(Run).where(Run.project_id == project_id, Run.id == run_id).limit(1))
    if run is None:
        raise NotFoundError(f"run {run_id} not found")
    return to_run(session, project, run, now)


def list_runs(
    session: Session, project_id: str, project: str, *, all_runs: bool, limit: int, now: datetime
) -> list[wire.Run]:
    query = select(Run).where(Run.project_id == project_id, Run.deleted.is_(False))
    if not all_runs:
        query = query.where(Run.status.not_in(FINISHED_RUN))
    query = query.order_by(Run.submitted_at.desc()).limit(limit)
    return [to_run(session, project, run, now) for run in session.scalars(query)]


def find_run_ref(session: Session, project_id: str, run_name: str) -> JobRef:
    """The newest live run of the name (`NotFoundError` when there is none), no job."""
    run = find_run(session, project_id, run_name)
    return JobRef(run.run_name, run.status)


def find_job(
    session: Session, project_id: str, run_name: str, replica_num: int, job_num: int
) -> JobRef:
    """The run and the latest submission of its job (replica, job), if any was made."""
    run = find_run(session, project_id, run_name)
    job = session.scalar(
        select(Job)
        .where(Job.run_id == run.id, Job.replica_num == replica_num, Job.job_num == job_num)
        .order_by(Job.submission_num.desc())
        .limit(1)
    )
    if job is None:
        return JobRef(run.run_name, run.status)
    return JobRef(run.run_name, run.status, job.id, job.status)


def job_finished_at(session: Session, project_id: str, job_id: str) -> datetime | None:
    """When the job submission `job_id` of a run of the project ended (None: it has not,
    or it is no job of the project)."""
    return session.scalar(
        select(Job.finished_at)
        .join(Run, Run.id == Job.run_id)
        .where(Job.id == job_id, Run.project_id == project_id)
    )


def referenced_archives(session: Session) -> set[str]:
    """Every archive id a run's spec names (runs of any status: a finished run's
    archives are kept until the run itself is deleted or re-applied)."""
    named: set[str] = set()
    for spec in session.scalars(select(Run.spec)):
        refs = spec.get("file_archives") if isinstance(spec, dict) else None
        for ref in refs or ():
            if isinstance(ref, dict) and isinstance(ref.get("id"), str):
                named.add(ref["id"])
    return named


def project_archives(session: Session, project_id: str) -> set[str]:
    """The archive ids the runs of one project name (any status, as `referenced_archives`:
    what the server keeps for that project): counted against its upload quota."""
    named: set[str] = set()
    for spec in session.scalars(select(Run.spec).where(Run.project_id == project_id)):
        refs = spec.get("file_archives") if isinstance(spec, dict) else None
        for ref in refs or ():
            if isinstance(ref, dict) and isinstance(ref.get("id"), str):
                named.add(ref["id"])
    return named


def agent_ports(instance: AgentHost) -> frozenset[int]:
    """Ports of the instance's host that the service proxy and `runs/forward` never reach,
    whatever a run declares: the agent's API (the server's own tunnels may call it; 10998
    is the agent's default, as in `AgentDirectory.address`)."""
    return frozenset({instance.agent_port or 10998})


def find_endpoint(
    session: Session, project_id: str, run_name: str, replica_num: int, job_num: int, port: int
) -> tuple[InstanceRecord, int]:
    """The instance of the running job and the host port its container `port` maps to."""
    run = find_run(session, project_id, run_name)
    spec = run.spec if isinstance(run.spec, Mapping) else {}
    if port not in container_ports(spec):
        raise InvalidError(f"run {run_name} does not expose port {port}")
    job = session.scalar(
        select(Job)
        .where(Job.run_id == run.id, Job.replica_num == replica_num, Job.job_num == job_num)
        .order_by(Job.submission_num.desc())
        .limit(1)
    )
    if job is None or job.status != "running" or job.instance_id is None:
        raise NotFoundError(f"run {run_name} has no running job {job_num} (replica {replica_num})")
    instance = session.get(Instance, job.instance_id)
    if instance is None:
        raise NotFoundError(f"the instance of run {run_name} is gone")
    runtime = job.runtime if isinstance(job.runtime, Mapping) else {}
    host_port = int((runtime.get("ports") or {}).get(str(port), port))
    if host_port in agent_ports(instance):
        raise InvalidError(
            f"port {port} of run {run_name} is the agent's own port on its host: "
            "it is never forwarded; declare another port"
        )
    return instance_record(instance), host_port
