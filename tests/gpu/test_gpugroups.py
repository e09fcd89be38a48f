"""dstack's gpus/list from instances (pure), validated against dstack 0.22.5's model."""

from __future__ import annotations

from reconciler.core.gpugroups import gpu_groups
from reconciler.core.scheduling import Candidate, Gpu
from tests.services.missing import need_module


def host(
    name: str, gpus: int, *, price: float = 0.0, busy: frozenset[int] = frozenset()
) -> Candidate:
    return Candidate(
        instance_id=name,
        instance_name=name,
        fleet_name="f",
        cpus=16,
        arch="x86_64",
        memory_gb=128,
        disk_gb=64,
        gpus=tuple(Gpu(i, "H200", "nvidia", 141.0) for i in range(gpus)),
        price=price,
        busy_gpus=busy,
    )


def test_one_group_per_model_with_counts_prices_and_availability() -> None:
    [group] = gpu_groups([host("a", 1, price=4.0, busy=frozenset({0})), host("b", 8, price=32.0)])
    assert group == {
        "name": "H200",
        "memory_mib": 141 * 1024,
        "vendor": "nvidia",
        "availability": ["busy", "idle"],
        "spot": ["on-demand"],
        "count": {"min": 1, "max": 8},
        "price": {"min": 4.0, "max": 4.0},
        "offer_price": {"min": 4.0, "max": 32.0},
        "backends": ["remote"],
    }


def test_grouped_by_count_and_backend() -> None:
    groups = gpu_groups([host("a", 1), host("b", 8)], group_by=["backend", "count"])
    assert [(g["count"], g["backend"]) for g in groups] == [
        ({"min": 1, "max": 1}, "remote"),
        ({"min": 8, "max": 8}, "remote"),
    ]


def test_hosts_without_gpus_give_no_group() -> None:
    assert gpu_groups([host("cpu", 0)]) == []


def test_validates_against_dstacks_model() -> None:
    schemas = need_module(
        "dstack._internal.server.schemas.gpus",
        "pip install -e '.[dev]' (scripts/setup.sh --dev installs it)",
    )
    answer = {"gpus": gpu_groups([host("a", 1, price=3.5)])}
    parsed = schemas.ListGpusResponse.model_validate(answer)
    assert parsed.gpus[0].name == "H200"
