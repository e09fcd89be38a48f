"""The pure Slurm parsers (`reconciler.core.slurm_nodes`) on text a real Slurm printed.

`data/*_22.05.txt` were captured from Debian's slurm-wlm 22.05.8 (slurmctld + slurmd on one
node, `Gres=gpu:h200:1` backed by `File=/dev/null`); the other inputs are the forms Slurm's
documentation gives for states and GRES that one node cannot show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.core.slurm_nodes import (
    GresGpus,
    SlurmNode,
    SlurmParseError,
    cluster_offers,
    key_values,
    parse_gres,
    parse_nodes,
    parse_partitions,
)

DATA = Path(__file__).parent / "data"


def _node(name: str, state: str = "IDLE", gres: str = "gpu:h100:4", parts: str = "gpu") -> str:
    return (
        f"NodeName={name} Arch=x86_64 CPUTot=64 Gres={gres} RealMemory=512000 "
        f"OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC State={state} Partitions={parts} "
        "Reason=disk swap [root@2024-01-01T00:00:00]"
    )


def test_captured_scontrol_node_parses_to_the_node_slurm_has() -> None:
    text = (DATA / "scontrol_show_node_22.05.txt").read_text()
    (node,) = parse_nodes(text)
    assert node == SlurmNode(
        name="dy1",
        cpus=2,
        memory_mib=1000,
        gpus=(GresGpus("h200", 1),),
        state="IDLE",
        partitions=("gpu", "cpu"),
    )
    assert node.usable


def test_values_with_blanks_do_not_split_keys() -> None:
    values = key_values(_node("n1"))
    assert values["OS"] == "Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC"
    assert values["State"] == "IDLE"
    assert values["Reason"] == "disk swap [root@2024-01-01T00:00:00]"


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("(null)", ()),
        ("gpu:4", (GresGpus(None, 4),)),
        ("gpu:a100:4(S:0-1)", (GresGpus("a100", 4),)),
        ("gpu:h100:2(S:0),gpu:l4:1(S:1),shard:8", (GresGpus("h100", 2), GresGpus("l4", 1))),
        ("gpu:a100:8(S:0-1,3)", (GresGpus("a100", 8),)),
    ],
)
def test_gres_gpus(gres: str, gpus: tuple[GresGpus, ...]) -> None:
    assert parse_gres(gres) == gpus


@pytest.mark.parametrize("gres", ["gpu:a:b:c", "gpu:h100:many"])
def test_malformed_gres_is_an_error_not_a_guess(gres: str) -> None:
    with pytest.raises(SlurmParseError, match="GRES"):
        parse_gres(gres)


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("IDLE", True),
        ("MIXED", True),
        ("ALLOCATED", True),
        ("IDLE+DRAIN", False),
        ("MIXED+DRAIN", False),
        ("DOWN", False),
        ("DOWN*", False),
        ("IDLE*", False),
        ("IDLE+NOT_RESPONDING", False),
        ("FUTURE", False),
        ("IDLE+MAINT", False),
    ],
)
def test_node_states(state: str, usable: bool) -> None:
    (node,) = parse_nodes(_node("n1", state=state))
    assert node.usable is usable


def test_garbage_is_refused_with_the_line() -> None:
    with pytest.raises(SlurmParseError, match="not `Key=value`"):
        parse_nodes("slurm_load_node error: Unable to contact slurm controller")
    with pytest.raises(SlurmParseError, match="line 2: `CPUTot=` is not a number"):
        parse_nodes(_node("n1") + "\nNodeName=n2 RealMemory=1\n")
    with pytest.raises(SlurmParseError, match="sinfo line 1"):
        parse_partitions("gpu up\n")


def test_captured_cluster_offers_its_gpu_and_cpu_partitions() -> None:
    nodes = parse_nodes((DATA / "scontrol_show_node_22.05.txt").read_text())
    partitions = parse_partitions((DATA / "sinfo_partitions_22.05.txt").read_text())
    assert partitions == {"gpu": True, "cpu": True}
    offers = cluster_offers(
        "hpc", nodes, partitions, gpu_partitions={"H200": ["gpu"]}, cpu_partitions=["cpu"]
    )
    assert [(o.partition, o.gpu_name, o.gpu_count, o.cpus, o.memory_mib) for o in offers] == [
        ("gpu", "H200", 1, 2, 1000),
        ("cpu", None, 0, 2, 1000),
    ]
    assert all(o.price == 0.0 and o.nodes == 1 and o.available == 1 for o in offers)


def test_offers_group_shapes_count_usable_nodes_and_skip_down_partitions() -> None:
    text = "\n".join(
        [
            _node("a1"),
            _node("a2", state="MIXED"),
            _node("a3", state="IDLE+DRAIN"),
            _node("b1", gres="gpu:l4:1", parts="gpu,old"),
            _node("c1", gres="(null)", parts="cpu"),
        ]
    )
    offers = cluster_offers(
        "hpc",
        parse_nodes(text),
        {"gpu": True, "old": False, "cpu": True},
        gpu_partitions={"H100": ["gpu"], "L4": ["old"]},
        cpu_partitions=["cpu", "missing"],
        price=2.5,
    )
    assert [(o.partition, o.gpu_name, o.gpu_count, o.nodes, o.available) for o in offers] == [
        ("gpu", "H100", 4, 3, 2),  # b1's L4 is not an H100; a3 is drained
        ("cpu", None, 0, 1, 1),  # `old` is down, `missing` does not exist
    ]
    assert {o.price for o in offers} == {2.5}
