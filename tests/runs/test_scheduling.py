"""Placement decisions of reconciler.core.scheduling: fit, wait, or fail with a reason."""

from __future__ import annotations

from reconciler.core.scheduling import (
    Candidate,
    Gpu,
    NoFit,
    Placement,
    Range,
    Requirements,
    free_blocks,
    place_cluster,
    place_job,
    room_ask,
)


def _a100s(n: int) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, "A100", "nvidia", 80) for i in range(n))


def _cand(name: str, **kw: object) -> Candidate:
    base: dict[str, object] = {
        "instance_id": f"id-{name}",
        "instance_name": name,
        "fleet_name": "f",
        "cpus": 16,
        "arch": "x86_64",
        "memory_gb": 64,
        "disk_gb": 500,
    }
    base.update(kw)
    return Candidate(**base)  # type: ignore[arg-type]


def test_idle_instance_first_then_cheapest() -> None:
    busy_cheap = _cand("a", price=1.0, total_blocks=2, busy_blocks=1)
    idle_dear = _cand("b", price=2.0)
    placement = place_job(Requirements(), [busy_cheap, idle_dear])
    assert isinstance(placement, Placement)
    assert placement.instance_name == "b"


def test_gpus_are_disjoint_and_exact() -> None:
    req = Requirements(gpu_count=Range(2, 2), gpu_names=("A100",))
    cand = _cand("g", gpus=_a100s(4), total_blocks=4, busy_blocks=1, busy_gpus=frozenset({0}))
    placement = place_job(req, [cand])
    assert isinstance(placement, Placement)
    assert placement.gpus == (1, 2)
    assert placement.blocks == 2


def test_busy_matching_instance_means_wait() -> None:
    req = Requirements(gpu_count=Range(1, None))
    cand = _cand("g", gpus=_a100s(1), busy_blocks=1, busy_gpus=frozenset({0}))
    result = place_job(req, [cand])
    assert isinstance(result, NoFit)
    assert result.wait
    assert "busy" in result.message


def test_no_instance_ever_fits_names_the_requirement() -> None:
    req = Requirements(gpu_count=Range(1, None), gpu_names=("H100",))
    result = place_job(req, [_cand("g", gpus=_a100s(8))])
    assert isinstance(result, NoFit)
    assert not result.wait
    assert "gpu H100:1.. not met" in result.message
    assert "A100:80GB" in result.message


def test_memory_and_arch_and_filters() -> None:
    small = _cand("s", memory_gb=4)
    arm = _cand("arm", arch="aarch64")
    other = _cand("o", fleet_name="other")
    req = Requirements(cpu_arch="x86", fleets=("f",))
    result = place_job(req, [small, arm, other])
    assert isinstance(result, NoFit)
    assert "memory 8GB.. not met" in result.message
    assert "cpu arch x86 not met" in result.message
    assert "fleet other is not in fleets" in result.message


def test_no_candidates_is_no_fleets() -> None:
    result = place_job(Requirements(), [])
    assert isinstance(result, NoFit)
    assert result.message.startswith("no fleets")


def test_price_and_spot_policy() -> None:
    spot = _cand("spot", spot=True, price=0.5)
    dear = _cand("dear", price=9.0)
    assert isinstance(place_job(Requirements(max_price=1.0), [dear]), NoFit)
    placed = place_job(Requirements(spot_policy="spot"), [dear, spot])
    assert isinstance(placed, Placement)
    assert placed.instance_name == "spot"


def test_cluster_needs_cluster_fleet_and_distinct_instances() -> None:
    plain = [_cand("a"), _cand("b")]
    assert isinstance(place_cluster(Requirements(), 2, plain), NoFit)
    nodes = [_cand(n, fleet_name="c", cluster=True) for n in ("n1", "n0", "n2")]
    placed = place_cluster(Requirements(), 2, nodes)
    assert isinstance(placed, tuple)
    assert [p.instance_name for p in placed] == ["n0", "n1"]


def test_cluster_waits_when_members_busy() -> None:
    nodes = [
        _cand("n0", fleet_name="c", cluster=True),
        _cand("n1", fleet_name="c", cluster=True, busy_blocks=1),
    ]
    result = place_cluster(Requirements(), 2, nodes)
    assert isinstance(result, NoFit)
    assert result.wait


def test_host_port_collision_waits_for_another_instance() -> None:
    req = Requirements(host_ports=frozenset({8000}))
    taken = _cand("a", total_blocks=4, busy_blocks=1, busy_ports=frozenset({8000}))
    result = place_job(req, [taken])
    assert isinstance(result, NoFit)
    assert result.wait
    free = _cand("b", total_blocks=4, busy_blocks=1, busy_ports=frozenset({9000}))
    placed = place_job(req, [taken, free])
    assert isinstance(placed, Placement)
    assert placed.instance_name == "b"


def test_room_ask_is_the_least_a_matching_instance_needs() -> None:
    """A 2-GPU job needs 2 of 8 blocks on an 8-GPU host, 4 of 4 on a 2-GPU one: it asks
    for 2; an instance without its GPU does not count."""
    req = Requirements(gpu_count=Range(2, 2), gpu_names=("A100",))
    big = _cand("big", gpus=_a100s(8), total_blocks=8, busy_blocks=8)
    small = _cand("small", gpus=_a100s(2), total_blocks=4, busy_blocks=4)
    other = _cand("h100", gpus=(Gpu(0, "H100", "nvidia", 80),), total_blocks=1)
    assert room_ask(req, [small, big, other]) == 2
    assert room_ask(req, [small, other]) == 4
    assert room_ask(req, [other]) is None
    assert (free_blocks([big, small]), free_blocks([big, other]), free_blocks([])) == (0, 1, 0)
