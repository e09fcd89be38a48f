"""The local fleet's capacity follows the host and what each job asks for
(`reconciler.core.hostblocks`), through the scheduler's placement."""

from __future__ import annotations

from reconciler.core import hostblocks
from reconciler.core.jobspecs import requirements_of
from reconciler.core.scheduling import Candidate, Placement, place_job
from reconciler.engine.workers.instances import sized_blocks

DEFAULTS = {"cpu": {"min": 2, "max": None}, "memory": {"min": 8.0, "max": None}}  # normalized
HOST = {"cpus": 2, "arch": "x86_64", "memory_mib": 24105, "disk_mib": 100000, "gpus": []}


def _local(busy: int = 0, host: dict[str, object] = HOST) -> Candidate:
    total = hostblocks.total_blocks(host)
    return Candidate(
        instance_id="i", instance_name="local-0", fleet_name="local", cpus=int(str(host["cpus"])),
        arch="x86_64", memory_gb=int(str(host["memory_mib"])) / 1024, disk_gb=97,
        total_blocks=total, busy_blocks=busy, block_size=hostblocks.block_size(host, total),
    )  # fmt: skip


def _at_once(resources: dict[str, object], host: dict[str, object] = HOST) -> int:
    """How many such jobs the host-sized instance takes before it is full."""
    req = requirements_of({"resources": resources})
    busy = 0
    count = 0
    while isinstance(placed := place_job(req, [_local(busy, host)]), Placement):
        busy += placed.blocks
        count += 1
    return count


def test_the_blocks_follow_the_hosts_memory() -> None:
    assert hostblocks.total_blocks(HOST) == 1440  # (24105 - 1024) // 16, a multiple of 2 * 8
    small = {"cpus": 4, "memory_mib": 4096}
    assert hostblocks.total_blocks(small) == 192  # 3072 // 16
    assert hostblocks.total_blocks({"cpus": 1, "memory_mib": 0}) == 1


def test_a_job_takes_the_blocks_its_minimums_need() -> None:
    assert _at_once({"cpu": "0..", "memory": "10MB.."}) == 1440  # sleeping tasks
    assert _at_once({"cpu": "1..", "memory": "0.1GB.."}) == 16  # CPU-bound: 8 per CPU
    assert _at_once(DEFAULTS) == 8  # dstack's defaults: cpu 2.. (its 8GB.. sizes clouds)
    assert _at_once({"cpu": "0..", "memory": "4GB.."}) == 5  # memory-bound
    big = {**HOST, "cpus": 16, "memory_mib": 131072}
    assert _at_once({"cpu": "1..", "memory": "0.1GB.."}, big) == 128
    assert _at_once(DEFAULTS, big) == 64


def test_a_job_bigger_than_the_blocks_fails_instead_of_waiting() -> None:
    req = requirements_of({"resources": {"cpu": "0..", "memory": "23.5GB.."}})
    result = place_job(req, [_local()])
    assert not isinstance(result, Placement)
    assert not result.wait and "blocks" in result.message


def test_the_instances_worker_sizes_only_the_local_fleet_without_blocks() -> None:
    assert sized_blocks("local", None, HOST) == 1440
    assert sized_blocks("local", 1, HOST) == 1440
    assert sized_blocks("local", 4, HOST) is None  # the fleet's own number stays
    assert sized_blocks("ssh", None, HOST) is None
    assert sized_blocks("ssh", "auto", HOST) == 2
    assert sized_blocks("local", None, None) is None
