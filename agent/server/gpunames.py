"""GPU names and sizes as dstack says them (pure): ``NVIDIA H100 80GB HBM3`` is ``H100``.

``gpus.py`` calls these on what ``nvidia-smi`` and ``amd-smi`` print, so a job asking
``gpu: H200`` or ``gpu: 141GB`` (dstack's words, from its offers) matches the host's GPU.
The tools print marketing names with vendor, form factor and memory in them, and a
memory size a little under the nominal one (an H200 reports 143,771 MiB = 140.4 GiB,
dstack calls it 141GB): a known model's nominal size is used when the measured one is
within ``NOMINAL_TOLERANCE`` of it (the nearest, when two sizes exist); an unknown
model keeps its measured size.
"""

from __future__ import annotations

import re

# Nominal memory (GB, dstack's figures) of the models whose tools report a bit less.
NOMINAL_GB: dict[str, tuple[int, ...]] = {
    "B200": (180, 192),
    "GH200": (96, 144),
    "H200": (141,),
    "H100": (80, 94),
    "H100NVL": (94,),
    "H800": (80,),
    "A100": (40, 80),
    "A800": (80,),
    "A10G": (24,),
    "A10": (24,),
    "L40S": (48,),
    "L40": (48,),
    "L4": (24,),
    "T4": (16,),
    "V100": (16, 32),
    "A6000": (48,),
    "RTX4090": (24,),
    "RTX3090": (24,),
    "MI300X": (192,),
    "MI325X": (256,),
    "MI250X": (128,),
    "MI210": (64,),
}
NOMINAL_TOLERANCE = 0.07  # ECC and driver reservations: a T4 reports 15 GiB of 16

_PREFIXES = ("NVIDIA", "Tesla", "GeForce", "AMD", "Instinct", "Radeon")
_DROPPED = re.compile(r"^(\d+GB|PCIe|SXM\d*|HBM\w*|Generation|Max-Q|OAM)$", re.IGNORECASE)


def dstack_gpu_name(tool_name: str) -> str:
    """``NVIDIA A100-SXM4-80GB`` → ``A100``; ``NVIDIA GeForce RTX 4090`` → ``RTX4090``."""
    words = tool_name.replace("-", " ").split()
    while words and words[0] in _PREFIXES:
        words = words[1:]
    kept = [word for word in words if not _DROPPED.match(word)]
    if len(kept) >= 2 and kept[0] == "RTX" and kept[1][:1] == "A":
        kept = kept[1:]  # "RTX A6000" is dstack's A6000
    return "".join(kept) or tool_name.strip()


def nominal_memory_mib(name: str, measured_mib: int) -> int:
    """The nominal size of a known model when the measured one is close to it."""
    measured_gb = measured_mib / 1024
    close = [n for n in NOMINAL_GB.get(name, ()) if abs(measured_gb - n) <= n * NOMINAL_TOLERANCE]
    if not close:
        return measured_mib
    return min(close, key=lambda nominal: abs(measured_gb - nominal)) * 1024
