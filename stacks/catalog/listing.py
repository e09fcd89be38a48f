"""`dockyard offer`: the catalog searched from command-line filters (pure).

`list_offers` builds the same `Requirements` a fleet would from `--gpu`, `--backend`,
`--region`, `--spot-policy` and `--max-price`, and returns the offers cheapest first;
`offers_for_spec` is the same for a fleet spec (what the Pulumi engine uses when the
reconciler passes no chosen offers); `describe_resources` is the RESOURCES column
(`96xCPU, 1360GB, 8xA100 (80GB)`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stacks.catalog.matching import CatalogRow, find_offers, load_catalog
from stacks.catalog.requirements import requirements_from_spec
from stacks.offer import Offer


def list_offers(
    *,
    gpu: str | None = None,
    backends: Sequence[str] = (),
    regions: Sequence[str] = (),
    spot_policy: str = "auto",
    max_price: float | None = None,
    catalog: Iterable[CatalogRow] | None = None,
) -> tuple[Offer, ...]:
    """Offers matching the filters, cheapest first; ValueError on a malformed GPU spec."""
    spec: dict[str, Any] = {"spot_policy": spot_policy}
    if gpu:
        spec["resources"] = {"gpu": gpu}
    if backends:
        spec["backends"] = list(backends)
    if regions:
        spec["regions"] = list(regions)
    if max_price is not None:
        spec["max_price"] = max_price
    rows = load_catalog() if catalog is None else catalog
    return find_offers(requirements_from_spec(spec), rows)


def offers_for_spec(
    spec: Mapping[str, Any], catalog: Iterable[CatalogRow] | None = None
) -> tuple[Offer, ...]:
    """The offers a fleet spec matches (its resources, backends, regions, spot policy,
    max price), cheapest first; ValueError on a malformed resources spec."""
    rows = load_catalog() if catalog is None else catalog
    return find_offers(requirements_from_spec(spec), rows)


def describe_resources(offer: Offer) -> str:
    return (
        f"{offer.cpus}xCPU, {offer.memory_gib:g}GB, "
        f"{offer.gpu_count}x{offer.gpu_name} ({offer.gpu_memory_gib:g}GB)"
    )
