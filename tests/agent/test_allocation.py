"""GPU/CPU/memory bookkeeping: disjoint GPU sets, sums within the host, clear reasons."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.server.allocation import Capacity, Claim, detect_misfit

HOST = Capacity(gpus=frozenset({0, 1, 2, 3}), cpus=8.0, memory_mib=32768)


def claim(
    job_id: str, gpus: Iterable[int] = (), cpus: float | None = None, memory_mib: int | None = None
) -> Claim:
    return Claim(job_id, frozenset(gpus), cpus, memory_mib)


def test_disjoint_gpu_sets_fit() -> None:
    held = [claim("a", {0, 1})]
    assert detect_misfit(HOST, held, claim("b", {2, 3})) is None


def test_overlapping_gpus_are_refused_naming_the_holder() -> None:
    reason = detect_misfit(HOST, [claim("a", {0, 1})], claim("b", {1, 2}))
    assert reason == "GPU 1 already allocated to job a"


def test_gpus_not_on_the_host_are_refused() -> None:
    reason = detect_misfit(HOST, [], claim("b", {3, 4, 7}))
    assert reason == "GPU 4, 7 not on this host (GPUs here: 0, 1, 2, 3)"
    assert "GPUs here: none" in str(detect_misfit(Capacity(cpus=2), [], claim("c", {0})))


def test_cpu_sum_within_the_host() -> None:
    held = [claim("a", cpus=6.0), claim("b")]
    assert detect_misfit(HOST, held, claim("c", cpus=2.0)) is None
    assert detect_misfit(HOST, held, claim("c", cpus=2.5)) == "2.5 CPUs requested, 2 of 8 free"


def test_memory_sum_within_the_host() -> None:
    held = [claim("a", memory_mib=30000)]
    reason = detect_misfit(HOST, held, claim("b", memory_mib=4096))
    assert reason == "4096 MiB memory requested, 2768 of 32768 MiB free"


def test_a_job_does_not_collide_with_itself() -> None:
    assert detect_misfit(HOST, [claim("a", {0})], claim("a", {0})) is None


def test_jobs_without_requests_always_fit() -> None:
    held = [claim("a", {0, 1, 2, 3}, cpus=8.0, memory_mib=32768)]
    assert detect_misfit(HOST, held, claim("b")) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.frozensets(st.integers(0, 5), max_size=3),
            st.one_of(st.none(), st.floats(0.5, 4)),
            st.one_of(st.none(), st.integers(1, 20000)),
        ),
        max_size=12,
    )
)
def test_accepted_jobs_never_share_gpus_nor_exceed_the_host(
    requests: list[tuple[frozenset[int], float | None, int | None]],
) -> None:
    held: list[Claim] = []
    for number, (gpus, cpus, memory) in enumerate(requests):
        request = Claim(f"j{number}", gpus, cpus, memory)
        if detect_misfit(HOST, held, request) is None:
            held.append(request)
    for first, second in itertools.combinations(held, 2):
        assert not first.gpus & second.gpus
    assert all(claim.gpus <= HOST.gpus for claim in held)
    assert sum(claim.cpus or 0 for claim in held) <= HOST.cpus + 1e-9
    assert sum(claim.memory_mib or 0 for claim in held) <= HOST.memory_mib
