"""Dev environments' `inactivity_duration` (pure): when an unused environment ends.

dstack stops a dev environment that has had no SSH/IDE/attach connection for
`inactivity_duration` (counted from when it started running, or from when the last
connection closed), with `inactivity_duration_exceeded`. The agent's SSH server counts the
connections (`agent.server.activity`) and reports them in `JobState`; the jobs worker asks
`inactivity_verdict` on every pass. An agent that does not watch connections (no
embedded SSH server) reports none: nothing is enforced then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def inactivity_limit(spec: Mapping[str, Any]) -> int | None:
    """Seconds of allowed inactivity of a dev environment; None when off or not one."""
    limit = spec.get("inactivity_duration")
    if spec.get("type") != "dev-environment" or isinstance(limit, bool):
        return None
    return limit if isinstance(limit, int) and limit > 0 else None


@dataclass(frozen=True, slots=True)
class Activity:
    """What the agent reported (`JobState`): None fields = not known."""

    connections: int | None
    last_connection_at: float | None = None
    no_connections_secs: float | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    exceeded: bool
    idle_seconds: float | None  # None: the agent does not watch connections


def inactivity_verdict(
    limit: int, activity: Activity, *, running_since: float, now: float
) -> Verdict:
    """Whether the environment has been unused for `limit` seconds by `now`."""
    if activity.connections is None:
        return Verdict(False, None)
    if activity.connections > 0:
        return Verdict(False, 0.0)
    if activity.no_connections_secs is not None:
        idle = activity.no_connections_secs  # the agent's clock: no skew between hosts
    else:
        idle = now - max(running_since, activity.last_connection_at or 0.0)
    return Verdict(idle >= limit, max(idle, 0.0))
