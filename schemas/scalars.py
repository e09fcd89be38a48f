"""Scalar grammars shared by every type: durations, memory sizes, ranges, names and tags.

Pure functions used as pydantic before-validators by the models in this package. Their
rules are dstack 0.22.5's: a duration is seconds or `<n>s|m|h|d|w`; memory
is GB as a float or a string with `MB`/`GB`/`TB` (1 TB = 1024 GB); a range is `N`, `A..B`,
`A..`, `..B` or `{min, max}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from schemas.base import StrictModel
from schemas.problems import excerpt

_DURATION_RE = re.compile(r"(?P<amount>\d+) *(?P<unit>[smhdw])$")
_UNIT_SECONDS: Mapping[str, int] = MappingProxyType(
    {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
)
RESOURCE_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{1,40}$")
GROUP_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
_TAG_KEY_RE = re.compile(r"^[_\-a-zA-Z0-9]{1,60}$")
_TAG_VALUE_RE = re.compile(r"^[a-zA-Z0-9 .:/=_\-+@]{0,256}$")


def parse_duration(value: Any) -> int:
    """`90`, `"90"`, `"5m"`, `"2h"`, `"1d"`, `"1w"` -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like `30s`, `5m`, `2h`, got {excerpt(value)}")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
        match = _DURATION_RE.match(value)
        if match:
            return int(match.group("amount")) * _UNIT_SECONDS[match.group("unit")]
    raise ValueError(f"cannot parse the duration {excerpt(value)}: use seconds or `<n>s|m|h|d|w`")


def parse_off_duration(value: Any) -> Literal["off"] | int | None:
    """`max_duration`/`stop_duration`: `off`/`false` -> "off"; `true`/unset -> default."""
    if value == "off" or value is False:
        return "off"
    if value is True or value is None:
        return None
    seconds = parse_duration(value)
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def parse_idle_duration(value: Any) -> int | None:
    """`idle_duration`, `auto_cleanup_duration`: `off`/`false`/`-1` -> -1; `true` -> default."""
    if value == "off" or value is False or value == -1:
        return -1
    if value is True or value is None:
        return None
    return parse_duration(value)


def parse_memory(value: Any) -> Any:
    """Memory in GB: `24`, `24.5`, `"24GB"`, `"512MB"`, `"1TB"` -> float GB."""
    if isinstance(value, bool):
        raise ValueError(f"invalid memory size: {excerpt(value)}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.replace(" ", "").lower()
        try:
            if text.endswith("tb"):
                return float(text[:-2]) * 1024
            if text.endswith("gb"):
                return float(text[:-2])
            if text.endswith("mb"):
                return float(text[:-2]) / 1024
            return float(text)
        except ValueError:
            pass
        raise ValueError(f"invalid memory size {excerpt(value)}: use e.g. `24GB`, `512MB`, `1TB`")
    return value


Duration = Annotated[int, BeforeValidator(parse_duration, json_schema_input_type=int | str)]
OffDuration = Annotated[
    Literal["off"] | int | None,
    BeforeValidator(parse_off_duration, json_schema_input_type=int | str | bool | None),
]
IdleDuration = Annotated[
    int | None,
    BeforeValidator(parse_idle_duration, json_schema_input_type=int | str | bool | None),
]
Memory = Annotated[float, BeforeValidator(parse_memory, json_schema_input_type=float | str)]


def split_range(value: Any) -> Any:
    """`"A..B"` -> `{min, max}`; a bare value -> `{min: v, max: v}`; mappings pass."""
    if isinstance(value, str) and ".." in value:
        parts = value.replace(" ", "").split("..")
        if len(parts) != 2:
            raise ValueError(f"invalid range {excerpt(value)}: use `N`, `A..B`, `A..` or `..B`")
        return {"min": parts[0] or None, "max": parts[1] or None}
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return {"min": value, "max": value}
    return value


def _check_order(low: float | None, high: float | None) -> None:
    if low is None and high is None:
        raise ValueError("invalid empty range `..`")
    if low is not None and high is not None and low > high:
        raise ValueError(f"invalid range order: {low}..{high}")


class IntRange(StrictModel):
    """A count range: `2`, `2..8`, `2..`, `..8` or `{min, max}`."""

    json_shorthands = ("string", "integer")

    min: int | None = None
    max: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return split_range(value)

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        _check_order(self.min, self.max)
        return self


class MemoryRange(StrictModel):
    """A memory range in GB: `24GB`, `24GB..`, `200GB..1TB` or `{min, max}`."""

    json_shorthands = ("string", "number")

    min: Memory | None = None
    max: Memory | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return split_range(value)

    @model_validator(mode="after")
    def _ordered(self) -> MemoryRange:
        _check_order(self.min, self.max)
        return self


def check_tags(value: Any) -> Any:
    """Before-validator for `tags`: keys and values must suit every cloud's tag rules."""
    if not isinstance(value, dict):
        return value
    for key, item in value.items():
        if not isinstance(key, str) or not _TAG_KEY_RE.match(key):
            raise ValueError(f"invalid tag key {excerpt(key)}: 1-60 of letters, digits, `_`, `-`")
        if isinstance(item, str) and not _TAG_VALUE_RE.match(item):
            raise ValueError(f"invalid tag value {excerpt(item)} for key {excerpt(key)}")
    return value


Tags = Annotated[dict[str, str] | None, BeforeValidator(check_tags)]
ResourceName = Annotated[str, Field(pattern=RESOURCE_NAME_RE.pattern)]
GroupName = Annotated[str, Field(pattern=GROUP_NAME_RE.pattern)]
