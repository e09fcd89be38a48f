"""Estimated $/h of what a capacity stack creates: fleets, volumes and gateways (pure).

The stack previews of a plan (`reconciler.engine.previewing`) show these figures on every
create, update, replace and delete of a cloud fleet, volume or gateway:

- a fleet: its cheapest catalog offer (`offers.csv`) times its nodes (the instances only;
  their root disks are not counted, as the run prices of `costing` do not count them);
- a volume: its `size` at the list price per GB-month of the disk type its program
  creates (`VOLUME_DISK_TYPE`: EBS gp3, GCP pd-balanced), over 730 hours a month;
  a registered volume (`volume_id`) is $0 here: Dockyard neither creates nor deletes it;
- a gateway: its VM (`instance_type`, default `DEFAULT_GATEWAY_TYPE`), its static public
  IPv4 address and its boot disk (`GATEWAY_BOOT_DISK`).

The prices are `prices.csv` shipped in this package (its source and date are in
`SOURCE.md`): public on-demand list prices, estimates only. A backend, region or type
without a row gives no figure (`Estimate.per_hour` None) and says so in `basis`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from schemas.requirements import parse_range
from stacks.catalog.listing import offers_for_spec
from stacks.catalog.matching import CatalogRow

PRICES_FILE = "prices.csv"
HOURS_PER_MONTH = 730.0
"""The month AWS and Google Cloud use to turn monthly prices into hourly ones."""

VOLUME_DISK_TYPE = {"aws": "gp3", "gcp": "pd-balanced"}
"""The disk type a volume stack creates (the programs in `stacks.programs` use these)."""
DEFAULT_GATEWAY_TYPE = {"aws": "t3.small", "gcp": "e2-small"}
GATEWAY_BOOT_DISK = {"aws": ("gp3", 8), "gcp": ("pd-standard", 20)}
"""A gateway VM's boot disk: type and GB (AWS: the Ubuntu AMI's own root volume)."""


@dataclass(frozen=True, slots=True)
class PriceRow:
    """One list price: `item` (`disk/<type>`, `instance/<type>`, `ipv4`) in a region, per
    `unit` (`hour` or `GB-month`)."""

    backend: str
    region: str
    item: str
    unit: str
    price: float


@dataclass(frozen=True, slots=True)
class Estimate:
    """Estimated $/h (None: unknown) and what it counts, or why there is no figure."""

    per_hour: float | None
    basis: str


def parse_prices(text: str) -> tuple[PriceRow, ...]:
    """Pure: CSV text (the `prices.csv` columns) → rows."""
    return tuple(
        PriceRow(
            backend=rec["backend"].strip().lower(),
            region=rec["region"].strip().lower(),
            item=rec["item"].strip(),
            unit=rec["unit"].strip(),
            price=float(rec["price"]),
        )
        for rec in csv.DictReader(io.StringIO(text))
    )


def load_prices() -> tuple[PriceRow, ...]:
    """The prices shipped with Dockyard."""
    return parse_prices(resources.files("stacks.catalog").joinpath(PRICES_FILE).read_text("utf-8"))


class _Prices:
    def __init__(self, rows: Iterable[PriceRow], backend: str, region: str) -> None:
        self._rows = {r.item: r for r in rows if r.backend == backend and r.region == region}
        self.where = f"{backend} {region}"

    def get(self, item: str) -> PriceRow:
        row = self._rows.get(item)
        if row is None:
            raise LookupError(f"no list price for {item.replace('/', ' ')} in {self.where}")
        return row

    def disk(self, disk_type: str, gib: float) -> tuple[float, str]:
        row = self.get(f"disk/{disk_type}")
        return gib * row.price / HOURS_PER_MONTH, f"{gib:g} GB {disk_type} ${row.price:g}/GB-month"


def fleet_estimate(
    spec: Mapping[str, Any], catalog: Iterable[CatalogRow], *, nodes: int
) -> Estimate:
    """A cloud fleet of `nodes` instances: the cheapest matching offer times `nodes`."""
    try:
        offers = offers_for_spec(spec, catalog)
    except (ValueError, TypeError) as exc:
        return Estimate(None, f"no price: {exc}")
    if not offers:
        return Estimate(None, "no price: no catalog offer matches the fleet's resources")
    offer = offers[0]
    market = "spot" if offer.spot else "on-demand"
    basis = f"{nodes} x {offer.backend} {offer.region} {offer.instance_type} ({market}) "
    return Estimate(round(offer.price * nodes, 4), basis + f"at ${offer.price:g}/h")


def volume_estimate(spec: Mapping[str, Any], prices: Iterable[PriceRow]) -> Estimate:
    """A cloud volume: its size at its disk type's price per GB-month."""
    backend = str(spec.get("backend") or "").lower()
    if spec.get("volume_id") is not None:
        return Estimate(
            0.0, "registers an existing volume: Dockyard neither creates nor deletes it"
        )
    if backend not in VOLUME_DISK_TYPE or not spec.get("region") or spec.get("size") is None:
        return Estimate(None, "no price: a cloud volume needs backend, region and size")
    try:
        gib = float(parse_range(spec["size"], memory=True).min or 0)
        per_hour, basis = _Prices(prices, backend, str(spec["region"]).lower()).disk(
            VOLUME_DISK_TYPE[backend], gib
        )
    except (LookupError, ValueError, TypeError) as exc:
        return Estimate(None, f"no price: {exc}")
    return Estimate(round(per_hour, 4), basis)


def gateway_estimate(spec: Mapping[str, Any], prices: Iterable[PriceRow]) -> Estimate:
    """A cloud gateway: its VM, its static IPv4 address and its boot disk."""
    backend = str(spec.get("backend") or "").lower()
    if backend not in DEFAULT_GATEWAY_TYPE or not spec.get("region"):
        return Estimate(None, "no price: a cloud gateway needs backend and region")
    kind = str(spec.get("instance_type") or DEFAULT_GATEWAY_TYPE[backend])
    table = _Prices(prices, backend, str(spec["region"]).lower())
    try:
        vm, ip = table.get(f"instance/{kind}"), table.get("ipv4")
        disk, disk_basis = table.disk(*GATEWAY_BOOT_DISK[backend])
    except LookupError as exc:
        return Estimate(None, f"no price: {exc}")
    basis = f"{kind} ${vm.price:g}/h + IPv4 ${ip.price:g}/h + {disk_basis}"
    return Estimate(round(vm.price + ip.price + disk, 4), basis)
