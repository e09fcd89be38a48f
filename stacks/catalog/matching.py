"""The offers catalog and the search over it: requirements in, offers out, cheapest first.

`load_catalog()` reads `offers.csv` shipped in this package (its source and date are in
`SOURCE.md` next to it). `find_offers` is pure: it expands each catalog row into an
on-demand and a spot offer as the spot policy allows, keeps those that satisfy the
requirements, and sorts them by price (ties: backend, region, instance type, on-demand
first). `group_offers` aggregates them for `dockyard offer --group-by`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from stacks.catalog.requirements import Requirements
from stacks.offer import Offer

CATALOG_FILE = "offers.csv"
GROUP_KEYS = ("gpu", "backend", "region", "count")


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """One instance type in one region, with both prices."""

    backend: str
    region: str
    zones: tuple[str, ...]
    instance_type: str
    gpu_vendor: str
    gpu_name: str
    gpu_count: int
    gpu_memory_gib: float
    cpus: int
    memory_gib: float
    price_on_demand: float
    price_spot: float | None

    def offer(self, *, spot: bool) -> Offer:
        price = self.price_spot if spot else self.price_on_demand
        assert price is not None
        return Offer(
            backend=self.backend,
            region=self.region,
            instance_type=self.instance_type,
            gpu_vendor=self.gpu_vendor,
            gpu_name=self.gpu_name,
            gpu_count=self.gpu_count,
            gpu_memory_gib=self.gpu_memory_gib,
            cpus=self.cpus,
            memory_gib=self.memory_gib,
            spot=spot,
            price=price,
            zones=self.zones,
        )


def parse_catalog(text: str) -> tuple[CatalogRow, ...]:
    """Pure: CSV text (the `offers.csv` columns) → rows."""
    rows = []
    for rec in csv.DictReader(io.StringIO(text)):
        rows.append(
            CatalogRow(
                backend=rec["backend"].strip().lower(),
                region=rec["region"].strip().lower(),
                zones=tuple(z for z in rec["zones"].split("|") if z),
                instance_type=rec["instance_type"].strip(),
                gpu_vendor=rec["gpu_vendor"].strip().lower(),
                gpu_name=rec["gpu_name"].strip(),
                gpu_count=int(rec["gpu_count"]),
                gpu_memory_gib=float(rec["gpu_memory_gib"]),
                cpus=int(rec["cpus"]),
                memory_gib=float(rec["memory_gib"]),
                price_on_demand=float(rec["price_on_demand"]),
                price_spot=float(rec["price_spot"]) if rec["price_spot"] else None,
            )
        )
    return tuple(rows)


def load_catalog() -> tuple[CatalogRow, ...]:
    """The catalog shipped with Dockyard."""
    text = resources.files("stacks.catalog").joinpath(CATALOG_FILE).read_text("utf-8")
    return parse_catalog(text)


def _row_matches(row: CatalogRow, req: Requirements) -> bool:
    if req.backends and row.backend not in req.backends:
        return False
    if req.regions and row.region not in req.regions:
        return False
    if req.instance_types and row.instance_type.lower() not in req.instance_types:
        return False
    if req.gpu_vendor and row.gpu_vendor != req.gpu_vendor:
        return False
    if req.gpu_names and row.gpu_name.upper() not in req.gpu_names:
        return False
    return (
        req.gpu_count.contains(row.gpu_count)
        and req.gpu_memory_gib.contains(row.gpu_memory_gib)
        and req.gpu_total_memory_gib.contains(row.gpu_memory_gib * row.gpu_count)
        and req.cpus.contains(row.cpus)
        and req.memory_gib.contains(row.memory_gib)
    )


def _markets(spot_policy: str) -> tuple[bool, ...]:
    if spot_policy == "spot":
        return (True,)
    if spot_policy == "auto":
        return (False, True)
    return (False,)


def _sort_key(offer: Offer) -> tuple[Any, ...]:
    return (offer.price, offer.backend, offer.region, offer.instance_type, offer.spot)


def find_offers(req: Requirements, catalog: Iterable[CatalogRow]) -> tuple[Offer, ...]:
    """Pure: the offers satisfying `req`, cheapest first."""
    offers = []
    for row in catalog:
        if not _row_matches(row, req):
            continue
        for spot in _markets(req.spot_policy):
            if spot and row.price_spot is None:
                continue
            offer = row.offer(spot=spot)
            if req.max_price is not None and offer.price > req.max_price:
                continue
            offers.append(offer)
    return tuple(sorted(offers, key=_sort_key))


@dataclass(frozen=True, slots=True)
class OfferGroup:
    """Offers sharing the `--group-by` keys, with their price range and count."""

    key: tuple[tuple[str, str], ...]
    offers: int
    min_price: float
    max_price: float
    spot: bool
    on_demand: bool

    def to_json(self) -> dict[str, Any]:
        return {
            **dict(self.key),
            "offers": self.offers,
            "min_price": self.min_price,
            "max_price": self.max_price,
            "spot": self.spot,
            "on_demand": self.on_demand,
        }


def _group_value(offer: Offer, key: str) -> str:
    if key == "gpu":
        return f"{offer.gpu_name}:{offer.gpu_memory_gib:g}GB"
    if key == "count":
        return str(offer.gpu_count)
    return str(getattr(offer, key))


def group_offers(offers: Sequence[Offer], keys: Sequence[str]) -> tuple[OfferGroup, ...]:
    """Pure: aggregate offers by `keys` (a subset of gpu, backend, region, count)."""
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown:
        raise ValueError(f"cannot group by {', '.join(unknown)}: use {', '.join(GROUP_KEYS)}")
    groups: dict[tuple[tuple[str, str], ...], list[Offer]] = {}
    for offer in offers:
        key = tuple((k, _group_value(offer, k)) for k in keys)
        groups.setdefault(key, []).append(offer)
    result = [
        OfferGroup(
            key=key,
            offers=len(members),
            min_price=min(o.price for o in members),
            max_price=max(o.price for o in members),
            spot=any(o.spot for o in members),
            on_demand=any(not o.spot for o in members),
        )
        for key, members in groups.items()
    ]
    return tuple(sorted(result, key=lambda g: (g.min_price, g.key)))
