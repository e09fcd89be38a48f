"""What a project's runs cost (pure): $/h now, and over the last day and week.

A `Spend` is one job submission on an instance with a price: from when it was submitted
to when it finished (or now). `rate_at` adds the prices of what runs at a moment;
`cost_between` integrates them over a window; `hourly_rates` samples the rate for a chart.
A run on an instance without a price counts $0 (local and SSH hosts unless priced).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Spend:
    price: float  # $/h
    start: float  # unix seconds
    end: float | None  # None: still running


def rate_at(spends: Sequence[Spend], at: float) -> float:
    return sum(s.price for s in spends if s.start <= at and (s.end is None or s.end > at))


def cost_between(spends: Sequence[Spend], start: float, end: float) -> float:
    total = 0.0
    for spend in spends:
        begin, finish = max(spend.start, start), min(spend.end or end, end)
        if finish > begin:
            total += spend.price * (finish - begin) / 3600
    return total


def hourly_rates(spends: Sequence[Spend], now: float, hours: int) -> list[tuple[float, float]]:
    """The $/h at each hour of the last `hours` (oldest first), ending now."""
    return [(now - h * 3600, rate_at(spends, now - h * 3600)) for h in range(hours, -1, -1)]
