"""Pure decisions of elastic fleets (`nodes: min..max`): grow for waiting jobs, shrink idle.

As dstack schedules: a job lands on an existing fleet; a `nodes: 0..N` fleet grows on demand
up to `max` and shrinks back to `min` after `idle_duration`. Who calls what:

- the jobs worker, when `scheduling.place_job`/`place_cluster` finds no instance now, asks
  `choose_growth` which fleet could take the job by growing (the job then waits and
  records its demand: so many nodes of that fleet) or why none can (the job fails with
  dstack's reason, the messages naming the requirement each fleet fails);
- the fleets worker sums the demand recorded on a fleet and asks `grow_target` for the
  node count to bring its stack up with; `pick_victims` chooses idle instances to
  terminate, and `stack_nodes` the count a cloud stack keeps.

Only cloud fleets grow: the local fleet is this host, an SSH fleet's hosts are listed.
What a new cloud instance could be is read from the fleet spec (`resources`,
`spot_policy`); cloud fleets are homogeneous (one offer for every node), so an instance
that is already up and fails a requirement means a new one would fail it too.
No I/O, no clock: timestamps and counts come in as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from reconciler.core.scheduling import Candidate, Requirements, static_mismatch
from schemas.requirements import ANY, Range, resources_of

FleetKind = Literal["local", "ssh", "cloud"]
_LOCAL_BACKENDS = frozenset({"local", "ssh", "remote"})
_GROWING_STATUSES = frozenset({"submitted", "active"})


def fleet_kind(spec: Mapping[str, Any]) -> FleetKind:
    """SSH fleet (`ssh_config`), cloud fleet (a cloud backend) or the local fleet."""
    if spec.get("ssh_config") is not None:
        return "ssh"
    backends = {str(b).lower() for b in spec.get("backends") or ()}
    return "cloud" if backends - _LOCAL_BACKENDS else "local"


def node_bounds(spec: Mapping[str, Any]) -> tuple[int, int | None]:
    """`nodes` as (min, max); max None = no limit. A bare count N is N..N."""
    nodes = spec.get("nodes")
    if isinstance(nodes, Mapping):
        low = int(nodes.get("min") or 0)
        high = nodes.get("max")
        return low, None if high is None else int(high)
    if isinstance(nodes, int) and not isinstance(nodes, bool):
        return nodes, nodes
    return 0, None


def _overlap(wanted: Range, offered: Range) -> bool:
    if wanted.min is not None and offered.max is not None and wanted.min > offered.max:
        return False
    return not (wanted.max is not None and offered.min is not None and wanted.max < offered.min)


@dataclass(frozen=True, slots=True)
class Offered:
    """What a new instance of a cloud fleet may have: its spec's `resources` and profile.

    Unset fields are unconstrained (dstack: `resources` unset = any offer)."""

    cpu: Range = field(default_factory=Range)
    cpu_arch: str | None = None
    memory_gb: Range = field(default_factory=Range)
    disk_gb: Range = field(default_factory=Range)
    gpu_count: Range = field(default_factory=Range)
    gpu_names: tuple[str, ...] = ()
    gpu_vendor: str | None = None
    gpu_memory_gb: Range = field(default_factory=Range)
    spot_policy: str = "on-demand"


def offered_by(spec: Mapping[str, Any]) -> Offered:
    """Pure: a fleet's normalized spec as the range of instances it may provision."""
    res = spec.get("resources")
    policy = str(spec.get("spot_policy") or "on-demand")
    if not isinstance(res, Mapping):
        return Offered(spot_policy=policy)
    offered = resources_of(res)
    return Offered(
        cpu=offered.cpu or ANY,
        cpu_arch=offered.cpu_arch,
        memory_gb=offered.memory_gib or ANY,
        disk_gb=offered.disk_gib or ANY,
        gpu_count=offered.gpu_count or ANY,
        gpu_names=offered.gpu_names,
        gpu_vendor=offered.gpu_vendor,
        gpu_memory_gb=offered.gpu_memory_gib or ANY,
        spot_policy=policy,
    )


def _gpu_text(names: Sequence[str], vendor: str | None, memory: Range, count: Range) -> str:
    parts = [vendor or "", ",".join(names), memory.describe("GB"), count.describe()]
    return ":".join(p for p in parts if p) or "any"


def offer_mismatch(req: Requirements, offer: Offered) -> str | None:
    """The first requirement no instance the fleet may provision can meet; None if none."""
    if not _overlap(req.cpu, offer.cpu):
        have = offer.cpu.describe()
        return f"cpu {req.cpu.describe()} not met: the fleet's resources give cpu {have}"
    if req.cpu_arch and offer.cpu_arch and req.cpu_arch != offer.cpu_arch:
        return f"cpu arch {req.cpu_arch} not met: the fleet's resources give {offer.cpu_arch}"
    if not _overlap(req.memory_gb, offer.memory_gb):
        have = offer.memory_gb.describe("GB")
        return f"memory {req.memory_gb.describe('GB')} not met: the fleet's resources give {have}"
    if req.disk_gb is not None and not _overlap(req.disk_gb, offer.disk_gb):
        have = offer.disk_gb.describe("GB")
        return f"disk {req.disk_gb.describe('GB')} not met: the fleet's resources give {have}"
    if req.spot_policy != "auto" and offer.spot_policy not in ("auto", req.spot_policy):
        have = offer.spot_policy
        return f"spot_policy {req.spot_policy} not met: the fleet's spot_policy is {have}"
    if req.wants_gpu:
        return _gpu_mismatch(req, offer)
    return None


def _gpu_mismatch(req: Requirements, offer: Offered) -> str | None:
    wanted_names = {n.lower() for n in req.gpu_names}
    offered_names = {n.lower() for n in offer.gpu_names}
    vendors = (req.gpu_vendor or "").lower(), (offer.gpu_vendor or "").lower()
    wanted_memory = req.gpu_memory_gb or Range()
    most = offer.gpu_count.max
    fits = (
        (most is None or (req.gpu_count.min or 0) <= most)
        and not (wanted_names and offered_names and not wanted_names & offered_names)
        and not (all(vendors) and vendors[0] != vendors[1])
        and _overlap(wanted_memory, offer.gpu_memory_gb)
    )
    if fits:
        return None
    wanted = _gpu_text(req.gpu_names, req.gpu_vendor, wanted_memory, req.gpu_count)
    have = _gpu_text(offer.gpu_names, offer.gpu_vendor, offer.gpu_memory_gb, offer.gpu_count)
    return f"gpu {wanted} not met: the fleet's resources give gpu {have}"


@dataclass(frozen=True, slots=True)
class ElasticFleet:
    """A fleet as growth sees it: its bounds, what it may provision, how many nodes it
    has (`live`: not terminated; `spare`: of those, not busy — idle or still starting) and
    the nodes other waiting jobs already asked of it (`demand`)."""

    fleet_id: str
    name: str
    kind: FleetKind
    status: str
    cluster: bool
    minimum: int
    maximum: int | None
    offered: Offered
    live: int = 0
    spare: int = 0
    demand: int = 0
    instances: tuple[Candidate, ...] = ()  # those with known host facts


def elastic_fleet(
    fleet_id: str, name: str, status: str, spec: Mapping[str, Any], **counts: Any
) -> ElasticFleet:
    """Pure: the growth view of a fleet row (`counts`: live, spare, demand, instances)."""
    minimum, maximum = node_bounds(spec)
    return ElasticFleet(
        fleet_id=fleet_id,
        name=name,
        kind=fleet_kind(spec),
        status=status,
        cluster=spec.get("placement") == "cluster",
        minimum=minimum,
        maximum=maximum,
        offered=offered_by(spec),
        **counts,
    )


def grow_target(live: int, spare: int, demand: int, maximum: int | None) -> int:
    """Nodes the fleet should have: waiting jobs take the spare (idle or starting) nodes
    first, the rest are new nodes; never above `max`, never below `live` (shrinking is
    `pick_victims`'s business)."""
    wanted = live + max(0, demand - spare)
    return max(live, wanted if maximum is None else min(maximum, wanted))


@dataclass(frozen=True, slots=True)
class Growth:
    """The fleet a waiting job counts on: `nodes` it needs, `live` → `target` of `maximum`."""

    fleet_id: str
    fleet_name: str
    nodes: int
    live: int
    target: int
    maximum: int | None

    @property
    def grows(self) -> bool:
        return self.target > self.live

    @property
    def at_max(self) -> bool:
        return self.maximum is not None and self.live >= self.maximum

    @property
    def message(self) -> str:
        of_max = "no max" if self.maximum is None else f"max {self.maximum}"
        if self.grows:
            added = self.target - self.live
            what = "a node" if added == 1 else f"{added} nodes"
            return (
                f"waiting for fleet {self.fleet_name} to provision {what} "
                f"({self.live} → {self.target} of {of_max})"
            )
        if self.at_max:
            return (
                f"waiting for fleet {self.fleet_name}: at max {self.maximum} nodes, "
                "matching instances are busy or starting"
            )
        return (
            f"waiting for fleet {self.fleet_name} to start its new nodes ({self.live} of {of_max})"
        )


def why_not(req: Requirements, nodes: int, fleet: ElasticFleet) -> str | None:
    """Why this fleet can never take the job by growing; None if it can."""
    name = fleet.name
    if fleet.status not in _GROWING_STATUSES:
        return f"fleet {name} is {fleet.status}"
    if fleet.kind == "local":
        return f"fleet {name} is this host (the local fleet): one host, it never grows"
    if fleet.kind == "ssh":
        return f"fleet {name} is an SSH fleet: its hosts are listed, it never grows"
    if req.instances:
        return f"fleet {name}: instances {list(req.instances)} are named, new ones are not"
    if nodes > 1 and not fleet.cluster:
        return f"fleet {name}: multi-node tasks need placement: cluster"
    if fleet.maximum is not None and nodes > fleet.maximum:
        return f"fleet {name}: {nodes} nodes needed, nodes max is {fleet.maximum}"
    mismatch = offer_mismatch(req, fleet.offered)
    if mismatch is not None:
        return f"fleet {name}: {mismatch}"
    hardware = replace(req, fleets=(), instances=(), host_ports=frozenset())
    for cand in fleet.instances:
        mismatch = static_mismatch(hardware, cand)
        if mismatch is not None:
            return f"fleet {name}: its nodes are alike and {cand.instance_name} fails {mismatch}"
    return None


def choose_growth(
    req: Requirements,
    nodes: int,
    fleets: Sequence[ElasticFleet],
    current: str | None = None,
) -> Growth | tuple[str, ...]:
    """The fleet that takes the job by growing, or why none can (one line per fleet).

    The fleet the job already waits for (`current`, a fleet id) is kept while it can
    still take the job; otherwise a fleet below its max comes first, then by name.
    """
    growths: list[Growth] = []
    reasons: list[str] = []
    for fleet in fleets:
        if req.fleets and fleet.name not in req.fleets:
            continue
        reason = why_not(req, nodes, fleet)
        if reason is not None:
            reasons.append(reason)
            continue
        target = grow_target(fleet.live, fleet.spare, fleet.demand + nodes, fleet.maximum)
        growths.append(Growth(fleet.fleet_id, fleet.name, nodes, fleet.live, target, fleet.maximum))
    if not growths:
        return tuple(reasons)
    return min(growths, key=lambda g: (g.fleet_id != current, g.at_max, g.fleet_name))


def hosts_coming(req: Requirements, fleets: Sequence[ElasticFleet]) -> str | None:
    """Why the job should wait for a local or SSH fleet that is still being set up (status
    `submitted`: its agent is being started or deployed), or None.

    Such a fleet has no instance to place on yet, and it never grows, so without this a
    run applied right after its fleet would fail `no_capacity` before the hosts exist."""
    for fleet in fleets:
        if req.fleets and fleet.name not in req.fleets:
            continue
        if fleet.kind != "cloud" and fleet.status == "submitted":
            return f"waiting for fleet {fleet.name}: its hosts are still being set up"
    return None


def failure_message(no_fit: str, reasons: Sequence[str]) -> str:
    """The message of a job no fleet can take: placement's, with why no fleet can grow.

    When placement only saw no instance at all, the fleets' reasons are the real story:
    dstack's `no offers`."""
    if not reasons:
        return no_fit
    if no_fit.startswith("no fleets: no instance is available"):
        return "no offers: " + "; ".join(reasons)
    return f"{no_fit}; " + "; ".join(reasons)


@dataclass(frozen=True, slots=True)
class IdleView:
    """An instance as shrinking sees it. `idle_seconds` is None unless it is idle."""

    key: str
    num: int
    idle_seconds: float | None


def pick_victims(
    instances: Sequence[IdleView], minimum: int, idle_for: float, *, from_top: bool
) -> list[str]:
    """Keys of the instances to terminate: idle at least `idle_for` s, above `minimum`.

    Highest numbers go first. With `from_top` (cloud fleets, whose stack keeps instances
    0..n-1 and removes the highest-numbered ones when `n` drops), only a run of idle
    instances at the top qualifies: a busy instance stops the choice.
    """
    surplus = len(instances) - minimum
    victims: list[str] = []
    for view in sorted(instances, key=lambda v: -v.num):
        if len(victims) >= surplus:
            break
        if view.idle_seconds is not None and view.idle_seconds >= idle_for:
            victims.append(view.key)
        elif from_top:
            break
    return victims


def stack_nodes(nums: Iterable[int]) -> int:
    """Nodes a cloud stack must keep so that instances `nums` stay (they are indexed)."""
    return max((n + 1 for n in nums), default=0)


def provision_nodes(spec: Mapping[str, Any], staying: Iterable[int]) -> int:
    """Nodes a cloud fleet's stack is brought up with on apply: `nodes.target` (or `min`),
    but never fewer than the instances it grew to and still has (capped at `max`)."""
    nodes = spec.get("nodes")
    target = nodes.get("target") if isinstance(nodes, Mapping) else None
    minimum, maximum = node_bounds(spec)
    wanted = max(int(target if target is not None else minimum), stack_nodes(staying))
    return wanted if maximum is None else min(maximum, wanted)
