"""Which instances of a fleet `fleet delete -i` (dstack's `fleets/delete_instances`) may
take away (pure; no I/O).

Dockyard's instances are what the fleet's configuration says: a cloud fleet's stack of
`nodes` (numbered from 0; the stack gives nodes back from the top), an SSH fleet's
`ssh_config.hosts`, the local fleet's one host. So:

- a **cloud** fleet's instances leave as an idle scale-down makes them leave (the fleets
  worker brings the stack down, then marks them terminated): each must be idle, they must
  be the top-most instances that stay, and at least `nodes.min` must stay;
- an **SSH** fleet's instances are its hosts: remove the host from `ssh_config.hosts` and
  apply the fleet (deleting the instance alone would bring it back at the next pass);
- the **local** fleet is this host: delete the fleet instead.

Called by `reconciler.web.routes_dstack` (`fleets/delete_instances`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.core.elastic import fleet_kind, node_bounds
from reconciler.errors import UsageError

GONE = frozenset({"terminating", "terminated"})
LEAVING_REASON = "idle_timeout"
"""The termination reason of an idle scale-down (the fleets worker's, `workers/growing.py`):
instances marked with it leave a cloud stack first."""


@dataclass(frozen=True, slots=True)
class InstanceView:
    num: int
    status: str
    busy_blocks: int = 0


def leaving_instances(
    fleet: str, spec: Mapping[str, Any], instances: Sequence[InstanceView], nums: Sequence[int]
) -> list[int]:
    """The instance numbers to take away, or `UsageError` saying why not and what to do."""
    kind = fleet_kind(spec)
    if kind == "ssh":
        raise UsageError(
            f"fleet {fleet}: an SSH fleet's instances are its hosts: remove the host from "
            "ssh_config.hosts and apply the fleet"
        )
    if kind == "local":
        raise UsageError(f"fleet {fleet}: the local fleet is this host: delete the fleet instead")
    staying = {i.num: i for i in instances if i.status not in GONE}
    wanted = sorted(set(nums))
    for num in wanted:
        instance = staying.get(num)
        if instance is None:
            raise UsageError(f"fleet {fleet}: no instance {num} (see `fleet get {fleet}`)")
        if instance.status != "idle" or instance.busy_blocks:
            status = "busy" if instance.busy_blocks else instance.status
            raise UsageError(f"fleet {fleet}: instance {num} is {status}: stop its runs first")
    keep = sorted(set(staying) - set(wanted))
    above = [n for n in keep if n > wanted[0]] if wanted else []
    if above:
        raise UsageError(
            f"fleet {fleet}: instance {wanted[0]} is below instance {above[-1]}, which stays: "
            "a cloud fleet's nodes leave from the top; delete the instances above it too"
        )
    low = node_bounds(spec)[0]
    if len(keep) < low:
        raise UsageError(
            f"fleet {fleet} keeps at least {low} nodes (nodes: {spec.get('nodes')}): apply it "
            "with a lower minimum first"
        )
    return wanted
