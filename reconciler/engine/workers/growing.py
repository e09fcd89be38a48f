"""What elastic fleets look like in the store: their nodes and the demand of waiting jobs.

A job no instance can take now, but that a `nodes: min..max` fleet could take by growing,
stays `submitted` and records its demand in `jobs.runtime`:
`{"awaiting_fleet": <fleet id>, "nodes_needed": n}` (no column: the demand lives and dies
with the submitted job, and the fleets worker only reads it).

- the jobs worker calls `elastic_fleets` for the pure `reconciler.core.elastic` choice;
- the fleets worker calls `fleet_state` to compute its target from stored state only, so
  a retry after a crash computes the same target and never adds nodes twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.adapters.db.store import Store
from reconciler.core.elastic import ElasticFleet, elastic_fleet, fleet_kind
from reconciler.core.scheduling import Candidate
from reconciler.domain.inventory import CapacityRecord, InstanceRecord
from reconciler.domain.statuses import InstanceStatus

AWAITING_FLEET = "awaiting_fleet"
NODES_NEEDED = "nodes_needed"
LEAVING_REASON = "idle_timeout"
"""Why a shrinking fleet terminates an instance; a cloud one leaves the stack first."""
_SPARE = frozenset(
    {InstanceStatus.PENDING.value, InstanceStatus.PROVISIONING.value, InstanceStatus.IDLE.value}
)
_GONE = frozenset({InstanceStatus.TERMINATING.value, InstanceStatus.TERMINATED.value})


def _staying(instances: Iterable[InstanceRecord]) -> list[InstanceRecord]:
    return [i for i in instances if i.status not in _GONE]


def _spare(instances: Iterable[InstanceRecord]) -> int:
    return sum(1 for i in _staying(instances) if i.status in _SPARE)


@dataclass(frozen=True, slots=True)
class Demand:
    """A submitted job waiting for a fleet to grow."""

    job_id: str
    run_name: str
    fleet_id: str
    nodes: int


@dataclass(frozen=True, slots=True)
class FleetState:
    """A fleet's instances (terminated ones excluded) and the jobs waiting for it."""

    instances: tuple[InstanceRecord, ...]
    demands: tuple[Demand, ...]

    @property
    def staying(self) -> list[InstanceRecord]:
        return _staying(self.instances)

    @property
    def leaving(self) -> list[InstanceRecord]:
        """Instances terminated for idleness whose node the stack may still hold."""
        return [
            i
            for i in self.instances
            if i.status == InstanceStatus.TERMINATING.value
            and i.termination_reason == LEAVING_REASON
        ]

    @property
    def live(self) -> int:
        return len(self.staying)

    @property
    def spare(self) -> int:
        return _spare(self.instances)

    @property
    def demand(self) -> int:
        return sum(d.nodes for d in self.demands)

    @property
    def run_names(self) -> list[str]:
        return sorted({d.run_name for d in self.demands})


def demand_of(runtime: Any) -> tuple[str, int] | None:
    """The (fleet id, nodes) a job's runtime says it waits for, if any."""
    if not isinstance(runtime, Mapping) or not runtime.get(AWAITING_FLEET):
        return None
    return str(runtime[AWAITING_FLEET]), max(1, int(runtime.get(NODES_NEEDED) or 1))


def waiting_jobs(store: Store, project_id: str) -> list[Demand]:
    """Every submitted job of the project that waits for a fleet to grow."""
    rows = store.waiting_job_runtimes(project_id)
    found = []
    for job_id, runtime, run_name in rows:
        demand = demand_of(runtime)
        if demand is not None:
            found.append(Demand(job_id, run_name, *demand))
    return found


_NOT_TERMINATED = tuple(s.value for s in InstanceStatus if s is not InstanceStatus.TERMINATED)


def fleet_state(store: Store, fleet: CapacityRecord) -> FleetState:
    """The fleet's non-terminated instances and the demand recorded on it."""
    demands = [d for d in waiting_jobs(store, fleet.project_id) if d.fleet_id == fleet.id]
    instances = store.instance_records(statuses=_NOT_TERMINATED, fleet_id=fleet.id)
    return FleetState(tuple(instances), tuple(demands))


def elastic_fleets(
    store: Store, project_id: str, candidates: Sequence[Candidate], *, job_id: str
) -> list[ElasticFleet]:
    """Every fleet of the project as growth sees it; `job_id`'s own demand is left out
    (the choice adds it back, for whichever fleet it picks).

    The waiting jobs are read only when some fleet can grow at all: on a project of local
    and SSH fleets, hundreds of jobs waiting for busy capacity would otherwise each read
    all the others at every poll."""
    fleets = store.fleet_records(project_id)
    elastic = any(fleet_kind(f.spec) == "cloud" for f in fleets)
    instances: list[InstanceRecord] = []
    if elastic:
        instances = store.instance_records(project_id=project_id, statuses=_NOT_TERMINATED)
    waiting = waiting_jobs(store, project_id) if elastic else []
    demands = [d for d in waiting if d.job_id != job_id]
    views = []
    for fleet in fleets:
        mine = [i for i in instances if i.fleet_id == fleet.id]
        views.append(
            elastic_fleet(
                fleet.id,
                fleet.name,
                fleet.status,
                fleet.spec,
                live=len(_staying(mine)),
                spare=_spare(mine),
                demand=sum(d.nodes for d in demands if d.fleet_id == fleet.id),
                instances=tuple(c for c in candidates if c.fleet_name == fleet.name),
            )
        )
    return views
