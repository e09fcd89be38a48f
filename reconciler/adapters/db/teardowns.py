"""A deleted project's hosts, as named units of work (a part of `Store`).

Deleting a project deletes its runs, jobs, fleets and instances with it (foreign keys), but
its jobs still run on their hosts and its SSH hosts' agents still hold its members' keys.
`record_teardowns` runs inside the deletion's own transaction (`readmodels.accounts.
delete_project`), before the rows go: one `host_teardowns` row per host that ran one of the
project's unfinished jobs (or one the store ended without its agent), is a live SSH
instance of its fleets or is listed by the `ssh_config` of one of its fleets not ended yet
(a host being deployed has no instance yet, but may already hold the members' keys), with
the host's address and the agent's ids of those jobs. The
teardowns worker (`reconciler.engine.workers.teardowns`) takes each row with a lease:
`load_teardown`, then `hold_teardown` (try again later, with why) or `finish_teardown`.
`fleets_on_host` tells it whether another fleet still lists the host. An SSH host that
leaves a fleet on its own (the fleet deleted, the host taken out of `ssh_config`) gets a row
the same way, with no jobs, in the transaction that marks its instance terminated
(`end_ssh_instance`, the instances worker).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.orm import Session

from reconciler.adapters.db.capacity import host_resources
from reconciler.adapters.db.leasing import leased_table, release_values
from reconciler.adapters.db.models import Fleet, HostTeardown, Instance, Job, Project, Run
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.statuses import JobStatus
from reconciler.domain.teardowns import HostTeardown as Teardown
from reconciler.domain.teardowns import TeardownHost
from schemas.sshhosts import spec_fleet_hosts

_ENDED = [status.value for status in JobStatus if status.is_finished()]
_ENDED_WITHOUT_AGENT = ("instance_unreachable", "interrupted_by_no_capacity")
_ADDRESS = ("hostname", "ssh_port", "ssh_user", "agent_port")


def _host(row: Instance) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "hostname": row.hostname,
        "ssh_port": row.ssh_port,
        "ssh_user": row.ssh_user,
        "agent_port": row.agent_port,
        "backend": row.backend,
        "resources": row.resources,
    }


def record_teardowns(session: Session, project_id: str, project_name: str, now: datetime) -> int:
    """In the deletion's transaction: one row per host of the project to undo; how many."""
    live_jobs = or_(
        Job.status.not_in(_ENDED),
        Job.termination_reason.in_(_ENDED_WITHOUT_AGENT),
    )
    jobs = session.execute(
        select(Job.id, Job.agent_job_id, Instance)
        .join(Run, Run.id == Job.run_id)
        .join(Instance, Instance.id == Job.instance_id)
        .where(Run.project_id == project_id, live_jobs)
    ).all()
    ssh_hosts = session.scalars(
        select(Instance).where(
            and_(
                Instance.project_id == project_id,
                Instance.backend == "ssh",
                Instance.status != "terminated",
            )
        )
    ).all()
    hosts: dict[tuple[Any, ...], tuple[dict[str, Any], list[str]]] = {}
    for instance in ssh_hosts:
        hosts.setdefault(_key(instance), (_host(instance), []))
    for job_id, agent_job_id, instance in jobs:
        hosts.setdefault(_key(instance), (_host(instance), []))[1].append(agent_job_id or job_id)
    specs = session.scalars(
        select(Fleet.spec).where(
            Fleet.project_id == project_id,
            Fleet.deleted.is_(False),
            Fleet.status.in_(["submitted", "active", "terminating"]),
        )
    ).all()
    known = {(host["hostname"], host["ssh_port"]) for host, _ in hosts.values()}
    for spec in specs:  # hosts being deployed have no instance yet, but may have our keys
        for host in spec_hosts(spec):
            if (host["hostname"], host["ssh_port"]) not in known:
                known.add((host["hostname"], host["ssh_port"]))
                hosts[(host["hostname"], host["ssh_port"])] = (host, [])
    for host, job_ids in hosts.values():
        session.add(
            HostTeardown(
                project_name=project_name,
                created_at=now,
                host=host,
                job_ids=sorted(set(job_ids)),
            )
        )
    session.flush()
    return len(hosts)


def spec_hosts(spec: Any) -> list[dict[str, Any]]:
    """Pure: the hosts a fleet spec's `ssh_config` lists (`schemas.sshhosts`), as `_host`
    records them, with their key and jump host (a spec that is no SSH fleet: none)."""
    try:
        hosts = spec_fleet_hosts(spec) if isinstance(spec, dict) else None
    except ValidationError:
        return []
    return [
        {
            "id": f"ssh_config:{host.index}",
            "name": host.hostname,
            "hostname": host.hostname,
            "ssh_port": host.port,
            "ssh_user": host.user,
            "agent_port": None,
            "backend": "ssh",
            "resources": host_resources(host.identity_file, host.proxy_jump),
        }
        for host in hosts or ()
    ]


def lists_host(spec: Any, hostname: str | None, ssh_port: int | None) -> bool:
    """Pure: whether a fleet spec's `ssh_config.hosts` names `hostname:ssh_port`."""
    return any(
        host["hostname"] == hostname and host["ssh_port"] == (ssh_port or 22)
        for host in spec_hosts(spec)
    )


def _key(instance: Instance) -> tuple[Any, ...]:
    return tuple(getattr(instance, name) for name in _ADDRESS)


def _teardown(row: HostTeardown) -> Teardown:
    host = row.host if isinstance(row.host, dict) else {}
    return Teardown(
        id=row.id,
        project=row.project_name,
        created_at=row.created_at,
        host=TeardownHost(
            id=str(host.get("id") or row.id),
            name=str(host.get("name") or ""),
            hostname=host.get("hostname"),
            ssh_port=host.get("ssh_port"),
            ssh_user=host.get("ssh_user"),
            agent_port=host.get("agent_port"),
            backend=host.get("backend"),
            resources=host.get("resources"),
        ),
        job_ids=tuple(str(j) for j in row.job_ids or ()),
        status_message=row.status_message,
    )


class TeardownsStore(StoreBase):
    """See the module docstring."""

    def end_ssh_instance(self, instance_id: str, token: str) -> bool:
        """Mark the SSH instance `terminated` (fenced by its lease) and, in the same
        transaction, record its host to undo (no jobs: none of ours run there by now)."""
        with self.writing() as session:
            row = session.get(Instance, instance_id)
            if row is None or row.lock_token != token:
                return False
            row.status = "terminated"
            project = session.get(Project, row.project_id)
            session.add(
                HostTeardown(
                    project_name=project.name if project is not None else "",
                    created_at=self.now(),
                    host=_host(row),
                    job_ids=[],
                )
            )
            return True

    def load_teardown(self, teardown_id: str, token: str) -> Teardown | None:
        """The row if this lease still holds it."""
        with self.reading() as session:
            row = session.get(HostTeardown, teardown_id)
            if row is None or row.lock_token != token:
                return None
            return _teardown(row)

    def hold_teardown(self, teardown_id: str, token: str, message: str, due_in: float) -> bool:
        """Record why the host is not done yet and release the lease, due in `due_in` s."""
        table = leased_table(HostTeardown)
        values = {"status_message": message[:2000], **release_values(table, self.now(), due_in)}
        with self.writing() as session:
            result = session.execute(
                update(table)
                .where(table.c.id == teardown_id, table.c.lock_token == token)
                .values(**values)
            )
            return bool(getattr(result, "rowcount", 0))

    def finish_teardown(self, teardown_id: str, token: str) -> bool:
        """The host is done: the row goes (fenced by the lease)."""
        with self.writing() as session:
            result = session.execute(
                delete(HostTeardown).where(
                    HostTeardown.id == teardown_id, HostTeardown.lock_token == token
                )
            )
            return bool(getattr(result, "rowcount", 0))

    def fleets_on_host(self, hostname: str | None, ssh_port: int | None) -> list[str]:
        """Fleets that still list this SSH host: a live instance at that address, or (a
        fleet being deployed has no instance yet) `ssh_config` naming it in the spec of a
        submitted or active fleet."""
        with self.reading() as session:
            found = session.scalars(
                select(Instance.fleet_id)
                .join(Fleet, Fleet.id == Instance.fleet_id)
                .where(Instance.backend == "ssh", Instance.status != "terminated")
                .where(Instance.hostname == hostname, Instance.ssh_port == ssh_port)
                .where(Fleet.deleted.is_(False), Fleet.status.not_in(["terminated", "failed"]))
            ).all()
            specs = session.execute(
                select(Fleet.id, Fleet.spec).where(
                    Fleet.deleted.is_(False), Fleet.status.in_(["submitted", "active"])
                )
            ).all()
        listed = {str(f) for f in found if f}
        listed.update(str(f) for f, spec in specs if lists_host(spec, hostname, ssh_port))
        return sorted(listed)

    def list_teardowns(self) -> list[Teardown]:
        """Every host still to undo, oldest first."""
        with self.reading() as session:
            rows = session.scalars(
                select(HostTeardown).order_by(HostTeardown.created_at, HostTeardown.id)
            )
            return [_teardown(row) for row in rows]
