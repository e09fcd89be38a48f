"""The offers catalog: its data, the requirements reader, the search and grouping."""

from __future__ import annotations

from typing import Any

import pytest

from stacks.catalog import (
    Range,
    find_offers,
    group_offers,
    load_catalog,
    parse_range,
    requirements_from_spec,
)

CATALOG = load_catalog()


def _offers(spec: dict[str, Any]) -> list[tuple[str, str, bool, float]]:
    found = find_offers(requirements_from_spec(spec), CATALOG)
    return [(o.backend, o.instance_type, o.spot, o.price) for o in found]


def test_catalog_rows_are_complete_and_unique() -> None:
    assert len(CATALOG) >= 40
    keys = [(r.backend, r.region, r.instance_type, r.gpu_name) for r in CATALOG]
    assert len(keys) == len(set(keys))
    assert {r.backend for r in CATALOG} == {"aws", "gcp"}
    for row in CATALOG:
        assert row.gpu_count >= 1 and row.cpus >= 1 and row.memory_gib > 0
        assert row.price_spot is None or row.price_spot < row.price_on_demand
        assert row.zones and all(z.startswith(row.region) for z in row.zones)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", Range(8, 8)),
        ("8..", Range(8, None)),
        ("..16", Range(None, 16)),
        ("2..8", Range(2, 8)),
        ({"min": 1, "max": 4}, Range(1, 4)),
        (None, Range()),
    ],
)
def test_parse_range(text: Any, expected: Range) -> None:
    assert parse_range(text) == expected


def test_memory_ranges_convert_units() -> None:
    assert parse_range("512MB..1TB", memory=True) == Range(0.5, 1024)


def test_gpu_grammar_string() -> None:
    req = requirements_from_spec({"resources": {"gpu": "nvidia:A100:40GB:2"}})
    assert req.gpu_vendor == "nvidia"
    assert req.gpu_names == ("A100",)
    assert req.gpu_memory_gib == Range(40, 40)
    assert req.gpu_count == Range(2, 2)


def test_gpu_name_without_count_means_one_or_more() -> None:
    req = requirements_from_spec({"resources": {"gpu": "H100,A100"}})
    assert req.gpu_names == ("H100", "A100")
    assert req.gpu_count == Range(1, None)


def test_normalized_mapping_form_matches_the_string_form() -> None:
    text = requirements_from_spec({"resources": {"gpu": "A100:80GB:8", "disk": "500GB.."}})
    mapping = requirements_from_spec(
        {
            "resources": {
                "gpu": {"name": ["A100"], "memory": {"min": 80, "max": 80}, "count": 8},
                "disk": {"size": {"min": 500}},
            }
        }
    )
    assert text == mapping
    assert mapping.disk_size_gib == 500


def test_cheapest_first_on_demand_by_default() -> None:
    found = _offers({"resources": {"gpu": "24GB.."}})
    prices = [p for *_, p in found]
    assert prices == sorted(prices)
    assert found[0][:3] == ("gcp", "g2-standard-4", False)
    assert not any(spot for _, _, spot, _ in found)


def test_spot_policy_auto_offers_both_markets() -> None:
    found = _offers({"resources": {"gpu": "L4:1"}, "spot_policy": "auto"})
    assert {spot for _, _, spot, _ in found} == {True, False}
    assert found[0][2] is True


def test_filters_backend_region_type_and_price() -> None:
    spec = {
        "resources": {"gpu": "A100"},
        "backends": ["gcp"],
        "regions": ["europe-west4"],
        "max_price": 10,
    }
    assert _offers(spec) == [("gcp", "a2-highgpu-1g", False, 3.7442)]
    assert _offers({"instance_types": ["P5.48xlarge"], "spot_policy": "spot"}) == [
        ("aws", "p5.48xlarge", True, 22.016),
        ("aws", "p5.48xlarge", True, 22.016),
    ]


def test_cpu_and_memory_filters() -> None:
    found = _offers({"resources": {"gpu": "A100:8", "cpu": "96..", "memory": "1200GB.."}})
    assert [t for _, t, _, _ in found] == ["a2-ultragpu-8g"]
    assert _offers({"resources": {"gpu": "A100:8", "cpu": "97.."}}) == []


def test_no_gpu_matches_nothing_in_a_gpu_catalog() -> None:
    assert _offers({"resources": {"gpu": 0}}) == []


def test_group_offers_by_gpu_and_backend() -> None:
    found = find_offers(requirements_from_spec({"resources": {"gpu": "A100"}}), CATALOG)
    groups = group_offers(found, ["gpu", "backend"])
    keys = [dict(g.key) for g in groups]
    assert {"gpu": "A100:40GB", "backend": "gcp"} in keys
    assert {"gpu": "A100:80GB", "backend": "aws"} in keys
    assert sum(g.offers for g in groups) == len(found)
    first = groups[0]
    assert first.min_price <= first.max_price
    with pytest.raises(ValueError, match="cannot group by zone"):
        group_offers(found, ["zone"])
