"""Offers for `…/offers/list`: the stacks catalog searched with a `--gpu` spec.

Thin: the search itself is `stacks.catalog` (pure); this module turns the request into a
spec and the offers into JSON. Raises `ValueError` for a malformed GPU spec.
"""

from __future__ import annotations

from typing import Any

from stacks.catalog import find_offers as search
from stacks.catalog import load_catalog, requirements_from_spec


def find_offers(gpu: str | None, limit: int) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {"resources": {"gpu": gpu}} if gpu else {}
    spec["spot_policy"] = "auto"
    offers = search(requirements_from_spec(spec), load_catalog())
    return [offer.to_json() for offer in offers[:limit]]
