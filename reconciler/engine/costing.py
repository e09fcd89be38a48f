"""What a plan costs per hour: each run action's best offer, and the total change in $/h.

A run lands on an instance of one of its fleets (`fleets:` in its spec, or any fleet of the
project). A fleet the local engine handles (the local fleet, SSH fleets: no cloud backend)
costs $0; a cloud fleet's best offer is the cheapest catalog offer (`stacks.catalog`) that
satisfies the run's resources within the fleet's backends, regions, spot policy and max
price. A run's price is that offer times its jobs (task `nodes`, service `replicas.min`,
one for a dev environment). A create adds the new price, a delete removes the old one, an
update or replace changes one into the other; unchanged resources cost nothing extra.
Capacity itself (fleets) is not added: a run is paid through the instance it runs on.

Pure: the catalog rows and the fleets are passed in. The plan function's policy checks
(`engine/policing.py`) and the PR comment (`reconciler.pr`) price runs here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.domain.kinds import ResourceKey
from reconciler.domain.plan import Action, ActionKind
from stacks.catalog import CatalogRow, offers_for_spec
from stacks.protocol import select_engine

_PROFILE = ("backends", "regions", "availability_zones", "instance_types", "spot_policy")


@dataclass(frozen=True, slots=True)
class Price:
    """$/h of one run: `jobs` times the per-instance price of `offer` (a short description)."""

    per_hour: float
    offer: str
    jobs: int = 1


@dataclass(frozen=True, slots=True)
class ActionCost:
    key: ResourceKey
    new: Price | None
    old: Price | None
    unmatched: bool = False
    """The run needs an offer and none matched its resources and fleets."""

    @property
    def delta(self) -> float:
        return (self.new.per_hour if self.new else 0.0) - (self.old.per_hour if self.old else 0.0)


@dataclass(frozen=True, slots=True)
class PlanCost:
    actions: tuple[ActionCost, ...] = ()

    @property
    def total_delta(self) -> float:
        return round(sum(cost.delta for cost in self.actions), 4)

    def by_key(self) -> dict[ResourceKey, ActionCost]:
        return {cost.key: cost for cost in self.actions}


def job_count(spec: Mapping[str, Any]) -> int:
    kind = spec.get("type")
    if kind == "task":
        nodes = spec.get("nodes")
        return int(nodes) if isinstance(nodes, int) else 1
    if kind == "service":
        replicas = spec.get("replicas")
        if isinstance(replicas, Mapping):
            return int(replicas.get("min") or 0)
        return int(replicas) if isinstance(replicas, int) else 1
    return 1


def _fleet_names(spec: Mapping[str, Any]) -> set[str] | None:
    refs = spec.get("fleets")
    if not refs:
        return None
    return {str(ref.get("name") if isinstance(ref, Mapping) else ref) for ref in refs}


def _merged(run: Mapping[str, Any], fleet: Mapping[str, Any]) -> dict[str, Any]:
    """The run's resources within the fleet's profile (the run's own profile narrows it)."""
    spec: dict[str, Any] = {"resources": run.get("resources") or {}}
    for key in _PROFILE:
        value = run.get(key) if run.get(key) is not None else fleet.get(key)
        if value is not None:
            spec[key] = value
    prices = [p for p in (run.get("max_price"), fleet.get("max_price")) if p is not None]
    if prices:
        spec["max_price"] = min(prices)
    return spec


def price_run(
    spec: Mapping[str, Any],
    fleets: Sequence[Mapping[str, Any]],
    catalog: Iterable[CatalogRow],
) -> Price | None:
    """The cheapest way to run `spec` on `fleets` (normalized specs), or None if none fits."""
    names = _fleet_names(spec)
    jobs = job_count(spec)
    best: Price | None = None
    rows = list(catalog)
    for fleet in fleets:
        if names is not None and fleet.get("name") not in names:
            continue
        if select_engine("fleet", fleet).engine == "local":
            return Price(0.0, f"fleet `{fleet.get('name')}` (local, $0)", jobs)
        try:
            offers = offers_for_spec(_merged(spec, fleet), rows)
        except ValueError:
            continue
        if offers and (best is None or offers[0].price * jobs < best.per_hour):
            offer = offers[0]
            market = "spot" if offer.spot else "on-demand"
            gpu = f"{offer.gpu_count}x{offer.gpu_name}" if offer.gpu_count else "no GPU"
            text = (
                f"{offer.backend} {offer.region} {offer.instance_type} ({gpu}, {market}, "
                f"${offer.price:g}/h) on fleet `{fleet.get('name')}`"
            )
            best = Price(round(offer.price * jobs, 4), text, jobs)
    return best


def estimate(
    actions: Iterable[Action],
    *,
    fleets: Sequence[Mapping[str, Any]],
    old_fleets: Sequence[Mapping[str, Any]],
    old_specs: Mapping[ResourceKey, Mapping[str, Any]],
    catalog: Iterable[CatalogRow],
) -> PlanCost:
    """Cost of every changing run action of a plan (see the module docstring)."""
    rows = list(catalog)
    costs: list[ActionCost] = []
    for action in actions:
        if not action.kind.is_run or not action.action.changes:
            continue
        new = old = None
        unmatched = False
        if action.action is not ActionKind.DELETE and action.spec is not None:
            new = price_run(action.spec, fleets, rows)
            unmatched = new is None
        old_spec = old_specs.get(action.key)
        if action.action is not ActionKind.CREATE and old_spec is not None:
            old = price_run(old_spec, old_fleets, rows)
        costs.append(ActionCost(action.key, new, old, unmatched))
    return PlanCost(tuple(costs))


def money(value: float, *, signed: bool = False) -> str:
    """`$1.2/h`, or `+$1.2/h` / `-$0.5/h` when `signed`."""
    text = f"${abs(value):,.4f}".rstrip("0").rstrip(".") + "/h"
    if not signed:
        return text
    return ("+" if value >= 0 else "-") + text
