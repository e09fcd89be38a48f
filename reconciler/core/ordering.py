"""Deterministic order of a plan's actions, from the references between resources (pure).

Runs reference infrastructure: network `volumes`, `fleets`, a named `gateway`. Creating or
changing infrastructure comes before the runs that use it; deleting runs comes first and
deleting infrastructure last, in reverse kind order (gateways, fleets, volumes). Within
those constraints ties break by stage, kind, then name (Argo's `syncTasks.Less`), so the
same actions always come out in the same order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reconciler.domain.kinds import Kind, ResourceKey
from reconciler.domain.plan import Action, ActionKind

_PASSIVE = frozenset({ActionKind.NOOP, ActionKind.RETAIN, ActionKind.BLOCKED})


def references(kind: Kind, spec: Mapping[str, Any], project: str) -> tuple[ResourceKey, ...]:
    """The resources of `project` that a run's spec names (volumes, fleets, gateway)."""
    if not kind.is_run:
        return ()
    volumes, fleets, gateway = spec.get("volumes"), spec.get("fleets"), spec.get("gateway")
    if not volumes and not fleets and not gateway:
        return ()
    keys: set[ResourceKey] = set()
    for volume in volumes or []:
        for name in _volume_names(volume):
            keys.add(ResourceKey(project, Kind.VOLUME, name))
    for fleet in fleets or []:
        fleet_name = _ref_name(fleet, project)
        if fleet_name:
            keys.add(ResourceKey(project, Kind.FLEET, fleet_name))
    gateway_name = _ref_name(gateway, project) if not isinstance(gateway, bool) else None
    if gateway_name:
        keys.add(ResourceKey(project, Kind.GATEWAY, gateway_name))
    return tuple(sorted(keys, key=lambda key: (key.kind.rank, key.name)))


def _volume_names(volume: Any) -> list[str]:
    if isinstance(volume, str):
        source = volume.split(":", 1)[0]
        return [] if "/" in source or not source else [source]
    if isinstance(volume, Mapping) and "name" in volume:
        names = volume["name"]
        return [str(n) for n in names] if isinstance(names, list) else [str(names)]
    return []


def _ref_name(ref: Any, project: str) -> str | None:
    """The name of a same-project reference (`name`, `project/name`, `{project, name}`)."""
    if isinstance(ref, str):
        owner, _, name = ref.rpartition("/")
        return name if owner in ("", project) else None
    if isinstance(ref, Mapping) and ref.get("name"):
        return str(ref["name"]) if ref.get("project") in (None, project) else None
    return None


def sort_key(action: Action) -> tuple[int, int, str, str]:
    """Stage, kind, name: run deletes, infra changes, run changes, infra deletes, the rest."""
    rank = action.kind.rank
    if action.action in _PASSIVE:
        return (4, rank, action.name, action.action.value)
    if action.action is ActionKind.DELETE:
        return (0, rank, action.name, "") if action.kind.is_run else (3, -rank, action.name, "")
    return (2 if action.kind.is_run else 1, rank, action.name, action.action.value)


def order_actions(actions: Sequence[Action]) -> tuple[Action, ...]:
    """Topological order over references, ties broken by `sort_key` (pure, total).

    Only changing actions have edges; the passive ones (noop, retain, blocked) come last,
    sorted, so a large unchanged repo costs one sort.
    """
    changing = [a for a in actions if a.action.changes]
    passive = sorted((a for a in actions if not a.action.changes), key=sort_key)
    return (*_topological(changing), *passive)


def _topological(actions: Sequence[Action]) -> list[Action]:
    by_key = {action.key: action for action in actions}
    edges = _edges(actions, by_key)
    if not edges:
        return sorted(actions, key=sort_key)
    indegree = dict.fromkeys(by_key, 0)
    for targets in edges.values():
        for target in targets:
            indegree[target] += 1
    ready = [(sort_key(a), a.key) for a in actions if indegree[a.key] == 0]
    heapq.heapify(ready)
    ordered: list[Action] = []
    while ready:
        _, key = heapq.heappop(ready)
        ordered.append(by_key[key])
        for target in edges.get(key, ()):
            indegree[target] -= 1
            if indegree[target] == 0:
                heapq.heappush(ready, (sort_key(by_key[target]), target))
    if len(ordered) != len(actions):  # a cycle cannot arise from run → infra references
        done = {a.key for a in ordered}
        ordered += sorted((a for a in actions if a.key not in done), key=sort_key)
    return ordered


def _edges(
    actions: Iterable[Action], by_key: Mapping[ResourceKey, Action]
) -> dict[ResourceKey, list[ResourceKey]]:
    """before → [after]: infra before the runs that use it; deletes the other way."""
    edges: dict[ResourceKey, list[ResourceKey]] = {}
    for action in actions:
        if not action.action.changes:
            continue
        for dependency in action.depends_on:
            other = by_key.get(dependency)
            if other is None or not other.action.changes or other.key == action.key:
                continue
            if other.action is ActionKind.DELETE:  # users first, then what they used
                edges.setdefault(action.key, []).append(other.key)
            elif action.action is not ActionKind.DELETE:  # infra first, then its users
                edges.setdefault(other.key, []).append(action.key)
    return edges
