"""Durations and byte sizes as people write them in flags: `7d`, `12h`, `90s`, `10MiB`, `1GB`.

Used by `reconciler.settings` (the retention and disk settings) and the agent-facing docs;
pure parsing, no I/O. A bare number is seconds or bytes.
"""

from __future__ import annotations

import re

_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration(value: object) -> object:
    """Seconds from `7d`, `12h`, `30m`, `90s`, `90` (other types pass through to pydantic)."""
    if not isinstance(value, str):
        return value
    match = _QUANTITY.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _DURATION_UNITS:
        raise ValueError(f"{value!r} is not a duration: write e.g. 90s, 30m, 12h, 7d")
    return float(match.group(1)) * _DURATION_UNITS[unit]


def parse_size(value: object) -> object:
    """Bytes from `10MiB`, `1GB`, `512k`, `4096` (other types pass through to pydantic)."""
    if not isinstance(value, str):
        return value
    match = _QUANTITY.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(f"{value!r} is not a size: write e.g. 4096, 512KiB, 10MiB, 1GiB")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def format_size(size: int) -> str:
    """`10485760` → `10MiB` (exact binary units when they fit, else bytes)."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def format_duration(seconds: float) -> str:
    """`604800` → `7d` (the largest whole unit), else seconds."""
    for unit in ("d", "h", "m"):
        factor = _DURATION_UNITS[unit]
        if seconds and seconds % factor == 0:
            return f"{int(seconds // factor)}{unit}"
    return f"{seconds:g}s"
