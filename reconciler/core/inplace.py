"""What may change in place, per kind: dstack 0.22.5's in-place update rules.

`classify_change` is a pure decision: given the kind, both specs and the field changes, it
says `update` (with `immediate` or `rolling` rollout) or `replace` (naming the fields that
forced it). Fields outside a kind's whitelist always force a replace, as in dstack's
`_check_can_update`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.core.diffing import top_field
from reconciler.domain.kinds import Kind
from reconciler.domain.plan import ActionKind, FieldChange, Rollout

RUN_IMMEDIATE = frozenset({"priority"})
SERVICE_IMMEDIATE = RUN_IMMEDIATE | {"replicas", "groups", "scaling", "gateway"}
SERVICE_ROLLING = frozenset(
    {
        "port", "probes", "resources", "volumes", "docker", "files", "image", "user",
        "privileged", "entrypoint", "working_dir", "python", "nvcc", "single_branch", "env",
        "shell", "commands",
    }
)  # fmt: skip
DEV_ENVIRONMENT_IMMEDIATE = RUN_IMMEDIATE | {"inactivity_duration"}
CLOUD_FLEET_IN_PLACE = frozenset(
    {
        "nodes", "reservation", "tags", "resources", "backends", "regions",
        "availability_zones", "instance_types", "spot_policy", "max_price",
    }
)  # fmt: skip
GATEWAY_IN_PLACE = frozenset({"domain", "default", "replicas"})
SSH_HOSTS = "ssh_config.hosts"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of the in-place rules for one changed resource."""

    action: ActionKind
    rollout: Rollout | None = None
    forced_by: tuple[str, ...] = ()
    destroys_data: bool = False


def classify_change(
    kind: Kind,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    changes: Sequence[FieldChange],
) -> Verdict:
    """Update in place or replace, per dstack's rules for `kind` (pure)."""
    if kind is Kind.VOLUME:
        return Verdict(ActionKind.REPLACE, forced_by=_tops(changes), destroys_data=True)
    if kind is Kind.FLEET:
        return _classify_fleet(old, new, changes)
    if kind is Kind.SERVICE:
        return _classify_service(old, new, changes)
    allowed = {
        Kind.GATEWAY: GATEWAY_IN_PLACE,
        Kind.DEV_ENVIRONMENT: DEV_ENVIRONMENT_IMMEDIATE,
        Kind.TASK: RUN_IMMEDIATE,
    }[kind]
    return _whitelist(changes, allowed)


def _whitelist(changes: Sequence[FieldChange], allowed: frozenset[str]) -> Verdict:
    forced = tuple(field for field in _tops(changes) if field not in allowed)
    if forced:
        return Verdict(ActionKind.REPLACE, forced_by=forced)
    return Verdict(ActionKind.UPDATE, rollout=Rollout.IMMEDIATE)


def _classify_service(
    old: Mapping[str, Any], new: Mapping[str, Any], changes: Sequence[FieldChange]
) -> Verdict:
    forced: list[str] = []
    rolling = False
    for field in _tops(changes):
        if field == "https" and {old.get("https"), new.get("https")} <= {None, True}:
            rolling = True
        elif field == "groups" and _routers(old) != _routers(new):
            forced.append("groups.router")
        elif field in SERVICE_IMMEDIATE:
            continue
        elif field in SERVICE_ROLLING:
            rolling = True
        else:
            forced.append(field)
    if forced:
        return Verdict(ActionKind.REPLACE, forced_by=tuple(forced))
    rollout = Rollout.ROLLING if rolling else Rollout.IMMEDIATE
    return Verdict(ActionKind.UPDATE, rollout=rollout)


def _routers(spec: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    groups = spec.get("groups") or []
    return sorted(
        (str(group.get("name")), repr(group.get("router")))
        for group in groups
        if isinstance(group, Mapping) and group.get("router") is not None
    )


def is_ssh_fleet(spec: Mapping[str, Any]) -> bool:
    """An SSH fleet lists its hosts in `ssh_config`; a cloud fleet has `nodes` instead."""
    return spec.get("ssh_config") is not None


def _classify_fleet(
    old: Mapping[str, Any], new: Mapping[str, Any], changes: Sequence[FieldChange]
) -> Verdict:
    if is_ssh_fleet(old) != is_ssh_fleet(new):
        return Verdict(ActionKind.REPLACE, forced_by=("ssh_config",))
    if not is_ssh_fleet(new):
        return _whitelist(changes, CLOUD_FLEET_IN_PLACE)
    forced = [_fleet_field(c.field) for c in changes if _fleet_field(c.field) != SSH_HOSTS]
    if any(_fleet_field(c.field) == SSH_HOSTS for c in changes) and not _hosts_only_added(
        old["ssh_config"], new["ssh_config"]
    ):
        forced.append(SSH_HOSTS)
    if forced:
        return Verdict(ActionKind.REPLACE, forced_by=tuple(dict.fromkeys(forced)))
    return Verdict(ActionKind.UPDATE, rollout=Rollout.IMMEDIATE)


def _fleet_field(field: str) -> str:
    parts = field.split(".")
    return ".".join(parts[:2]) if parts[0] == "ssh_config" else parts[0]


def _hosts_only_added(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Hosts may be added or removed; a kept host may change only its `identity_file`."""
    before = _hosts_by_name(old.get("hosts") or [])
    after = _hosts_by_name(new.get("hosts") or [])
    return all(before[name] == after[name] for name in before.keys() & after.keys())


def _hosts_by_name(hosts: Iterable[Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for host in hosts:
        raw = host if isinstance(host, Mapping) else {"hostname": host}
        entry = {k: v for k, v in raw.items() if v is not None and k != "identity_file"}
        result[str(entry.get("hostname"))] = entry
    return result


def _tops(changes: Iterable[FieldChange]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(top_field(change.field) for change in changes))
