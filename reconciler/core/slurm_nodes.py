"""What a Slurm cluster has, read from its own commands' text (pure, no I/O).

`reconciler.adapters.slurm_login` runs `scontrol show node --oneliner` and
`sinfo -h -o '%R|%a'` on the login node over SSH and hands their text here:

- `parse_nodes`: one `SlurmNode` per line of `scontrol show node -o` (name, CPUs, memory,
  GRES GPUs, state, partitions). Values may hold spaces (`OS=Linux 6.1 #1 SMP …`), so a
  line is split at `Key=` tokens, not at blanks;
- `parse_partitions`: partition name → up (`sinfo` availability);
- `cluster_offers`: the offers a cluster makes under its backend entry's `gpu_partitions`
  (GPU model → partitions) and `cpu_partitions`: one per (partition, node shape), with
  how many nodes have that shape and how many of them can take a job now. A node that is
  down, drained or failing offers nothing; a partition that is not up offers nothing.

Text that is not what Slurm prints raises `SlurmParseError` with the line, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z_]*)=")
# Slurm's base states (`State=IDLE+DRAIN`, `MIXED`, `DOWN*`: `*` = not responding).
_USABLE = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING"})
_UNUSABLE_FLAGS = frozenset(
    {"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "MAINT", "NOT_RESPONDING", "REBOOT",
     "RESERVED", "INVALID_REG", "POWERED_DOWN", "POWERING_DOWN"}
)  # fmt: skip


class SlurmParseError(ValueError):
    """Slurm's output was not what was expected; the message names the line."""


@dataclass(frozen=True, slots=True)
class GresGpus:
    """GPUs of one type on a node (`gpu:h100:4(S:0-1)` → type `h100`, count 4)."""

    type: str | None
    count: int


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    cpus: int
    memory_mib: int
    gpus: tuple[GresGpus, ...]
    state: str
    partitions: tuple[str, ...]

    @property
    def usable(self) -> bool:
        """Whether the node can take a job now (up, not drained, responding)."""
        base, *flags = self.state.upper().rstrip("*~#!%$@^-").split("+")
        return (
            base in _USABLE and not self.state.endswith("*") and not (set(flags) & _UNUSABLE_FLAGS)
        )


@dataclass(frozen=True, slots=True)
class ClusterOffer:
    """One node shape in one partition of one cluster (a dstack region)."""

    cluster: str
    partition: str
    gpu_name: str | None
    gpu_count: int
    cpus: int
    memory_mib: int
    nodes: int
    available: int
    price: float

    @property
    def instance_type(self) -> str:
        return f"{self.partition}:{self.cpus}xCPU:{self.memory_mib}MiB" + (
            f":{self.gpu_count}x{self.gpu_name}" if self.gpu_count else ""
        )


def key_values(line: str) -> dict[str, str]:
    """`A=1 B=x y C=` → {A: "1", B: "x y", C: ""} (values may hold blanks)."""
    matches = list(_KEY.finditer(line))
    if not matches or line[: matches[0].start()].strip():
        raise SlurmParseError(f"not `Key=value` text: {line[:120]!r}")
    values: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        values[match.group(1)] = line[match.end() : end].strip()
    return values


def parse_gres(text: str) -> tuple[GresGpus, ...]:
    """The GPUs in a node's `Gres=` value (other GRES kinds are ignored)."""
    if text in ("", "(null)"):
        return ()
    found = []
    for item in re.split(r",(?![^(]*\))", text):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 2:
            gpu_type, count = None, parts[1]
        elif len(parts) == 3:
            gpu_type, count = parts[1], parts[2]
        else:
            raise SlurmParseError(f"GRES `{item}` is not `gpu[:type]:count`")
        if not count.isdigit():
            raise SlurmParseError(f"GRES `{item}`: count `{count}` is not a number")
        found.append(GresGpus(gpu_type, int(count)))
    return tuple(found)


def _int(values: Mapping[str, str], key: str, line: int) -> int:
    text = values.get(key, "")
    if not text.isdigit():
        raise SlurmParseError(f"node line {line}: `{key}={text}` is not a number")
    return int(text)


def parse_nodes(text: str) -> tuple[SlurmNode, ...]:
    """`scontrol show node --oneliner` output → nodes."""
    nodes = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        values = key_values(line)
        if "NodeName" not in values:
            raise SlurmParseError(f"node line {number}: no `NodeName=`")
        partitions = values.get("Partitions", "")
        nodes.append(
            SlurmNode(
                name=values["NodeName"],
                cpus=_int(values, "CPUTot", number),
                memory_mib=_int(values, "RealMemory", number),
                gpus=parse_gres(values.get("Gres", "")),
                state=values.get("State", "UNKNOWN"),
                partitions=tuple(p for p in partitions.split(",") if p),
            )
        )
    return tuple(nodes)


def parse_partitions(text: str) -> dict[str, bool]:
    """`sinfo -h -o '%R|%a'` output → partition → up."""
    partitions: dict[str, bool] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, avail = line.strip().partition("|")
        if not sep or not name:
            raise SlurmParseError(f"sinfo line {number}: not `partition|availability`")
        partitions[name] = avail.strip() == "up"
    return partitions


def cluster_offers(
    cluster: str,
    nodes: Sequence[SlurmNode],
    partitions: Mapping[str, bool],
    *,
    gpu_partitions: Mapping[str, Sequence[str]],
    cpu_partitions: Sequence[str],
    price: float = 0.0,
) -> tuple[ClusterOffer, ...]:
    """The offers of one cluster (see the module docstring): GPU partitions offer the
    configured GPU model's nodes with GPUs; CPU partitions offer their nodes without."""
    wanted: list[tuple[str, str | None]] = [
        (partition, gpu) for gpu, names in gpu_partitions.items() for partition in names
    ] + [(partition, None) for partition in cpu_partitions]
    shapes: dict[tuple[str, str | None, int, int, int], list[SlurmNode]] = {}
    for partition, gpu in wanted:
        if not partitions.get(partition, False):
            continue
        for node in nodes:
            if partition not in node.partitions:
                continue
            count = _gpus_of(node, gpu) if gpu is not None else 0
            if gpu is not None and count == 0:
                continue
            shape = (partition, gpu, count, node.cpus, node.memory_mib)
            shapes.setdefault(shape, []).append(node)
    return tuple(
        ClusterOffer(
            cluster=cluster,
            partition=partition,
            gpu_name=gpu,
            gpu_count=count,
            cpus=cpus,
            memory_mib=memory,
            nodes=len(members),
            available=sum(1 for n in members if n.usable),
            price=price,
        )
        for (partition, gpu, count, cpus, memory), members in shapes.items()
    )


def _gpus_of(node: SlurmNode, gpu: str) -> int:
    """The node's GPUs of model `gpu` (GRES type matched without case; an untyped GRES
    counts: the partition's configuration says which model it is)."""
    return sum(g.count for g in node.gpus if g.type is None or g.type.lower() == gpu.lower())
