"""Blocked capacity, and the runs that can only wait for it (pure, no I/O).

Called by the plan function (`reconciler.engine.planning`) once it knows which capacity
actions no engine can carry out on this server (no Pulumi CLI, no credentials for the
cloud, an unknown backend): `block_actions` turns those into `blocked` actions with the
reason and its fix, then blocks every changing run that could only be placed on blocked
capacity: a run that names fleets all of which are blocked (or, naming none, whose project
has only blocked fleets), or that mounts a blocked volume, or uses a blocked gateway. The
run's reason says what it waits for ("waits for fleet `cloud`, which is blocked: …").
Everything else is left as planned: blocked means blocked, nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from reconciler.domain.kinds import Kind, ResourceKey
from reconciler.domain.plan import Action, ActionKind

BLOCKED_PREFIX = "blocked: "


def block_actions(
    actions: Sequence[Action], reasons: Mapping[ResourceKey, str]
) -> tuple[Action, ...]:
    """`actions` with those in `reasons` blocked, and the runs that wait for them."""
    blocked = [
        replace(a, action=ActionKind.BLOCKED, reason=BLOCKED_PREFIX + reasons[a.key])
        if a.key in reasons
        else a
        for a in actions
    ]
    missing = {
        a.key: reasons[a.key]
        for a in actions
        if a.key in reasons and a.action in (ActionKind.CREATE, ActionKind.REPLACE)
    }
    if not missing:
        return tuple(blocked)
    fleets = [a.key for a in actions if a.kind is Kind.FLEET and a.action is not ActionKind.DELETE]
    return tuple(_wait_for(a, missing, fleets) for a in blocked)


def _wait_for(
    action: Action, missing: Mapping[ResourceKey, str], fleets: Sequence[ResourceKey]
) -> Action:
    if not action.kind.is_run or not action.action.changes or action.action is ActionKind.DELETE:
        return action
    needed = [key for key in action.depends_on if key.kind is not Kind.FLEET and key in missing]
    named = [key for key in action.depends_on if key.kind is Kind.FLEET]
    candidates = named or fleets
    if candidates and all(key in missing for key in candidates):
        needed = [*candidates[:1], *needed]
    if not needed:
        return action
    key = needed[0]
    reason = (
        f"{BLOCKED_PREFIX}waits for {key.kind.value} `{key.name}`, which is "
        f"{BLOCKED_PREFIX}{missing[key]}"
    )
    return replace(action, action=ActionKind.BLOCKED, reason=reason)
