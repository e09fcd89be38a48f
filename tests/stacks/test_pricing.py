"""The list prices of volumes and gateways (`prices.csv`) and the estimates made of them
(`stacks.catalog.pricing`): every region of the offers catalog has a price for each disk
type and default gateway type the programs create, and the figures add up."""

from __future__ import annotations

import pytest

from stacks.catalog import load_catalog, load_prices
from stacks.catalog.pricing import (
    DEFAULT_GATEWAY_TYPE,
    GATEWAY_BOOT_DISK,
    HOURS_PER_MONTH,
    VOLUME_DISK_TYPE,
    gateway_estimate,
    parse_prices,
    volume_estimate,
)

PRICES = load_prices()


def test_rows_are_unique_positive_and_cover_the_offer_regions() -> None:
    keys = [(r.backend, r.region, r.item) for r in PRICES]
    assert len(keys) == len(set(keys))
    assert all(r.price > 0 and r.unit in ("hour", "GB-month") for r in PRICES)
    assert all((r.unit == "GB-month") == r.item.startswith("disk/") for r in PRICES)
    regions = {(row.backend, row.region) for row in load_catalog()}
    for backend, region in regions:
        items = {r.item for r in PRICES if (r.backend, r.region) == (backend, region)}
        needed = {
            f"disk/{VOLUME_DISK_TYPE[backend]}",
            f"disk/{GATEWAY_BOOT_DISK[backend][0]}",
            f"instance/{DEFAULT_GATEWAY_TYPE[backend]}",
            "ipv4",
        }
        assert needed <= items, (backend, region)


def test_a_volume_costs_its_size_at_its_disk_price() -> None:
    spec = {"backend": "gcp", "region": "us-central1", "size": "500GB"}
    estimate = volume_estimate(spec, PRICES)
    assert estimate.per_hour == pytest.approx(500 * 0.10 / HOURS_PER_MONTH, abs=1e-4)
    assert estimate.basis == "500 GB pd-balanced $0.1/GB-month"


def test_an_aws_gateway_counts_its_vm_address_and_root_disk() -> None:
    spec = {"backend": "aws", "region": "eu-west-1", "domain": "gw.example.com"}
    estimate = gateway_estimate(spec, PRICES)
    assert estimate.per_hour == pytest.approx(0.0228 + 0.005 + 8 * 0.088 / 730, abs=1e-4)
    assert estimate.basis.startswith("t3.small $0.0228/h + IPv4 $0.005/h + 8 GB gp3")


def test_parse_prices_reads_the_columns() -> None:
    rows = parse_prices("backend,region,item,unit,price\nAWS,US-East-1,ipv4,hour,0.005\n")
    assert [(r.backend, r.region, r.item, r.unit, r.price) for r in rows] == [
        ("aws", "us-east-1", "ipv4", "hour", 0.005)
    ]
