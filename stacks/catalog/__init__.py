"""The GPU offers catalog (data shipped in this package) and the pure search over it.

from stacks.catalog import load_catalog, requirements_from_spec, find_offers
offers = find_offers(requirements_from_spec(fleet_spec), load_catalog())
"""

from schemas.requirements import Range, parse_range
from stacks.catalog.listing import describe_resources, list_offers, offers_for_spec
from stacks.catalog.matching import (
    GROUP_KEYS,
    CatalogRow,
    OfferGroup,
    find_offers,
    group_offers,
    load_catalog,
    parse_catalog,
)
from stacks.catalog.pricing import (
    Estimate,
    PriceRow,
    fleet_estimate,
    gateway_estimate,
    load_prices,
    volume_estimate,
)
from stacks.catalog.requirements import Requirements, requirements_from_spec

__all__ = [
    "GROUP_KEYS",
    "CatalogRow",
    "Estimate",
    "OfferGroup",
    "PriceRow",
    "Range",
    "Requirements",
    "describe_resources",
    "find_offers",
    "fleet_estimate",
    "gateway_estimate",
    "group_offers",
    "list_offers",
    "load_catalog",
    "load_prices",
    "offers_for_spec",
    "parse_catalog",
    "parse_range",
    "requirements_from_spec",
    "volume_estimate",
]
