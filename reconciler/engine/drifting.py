"""Drift of capacity: a stack changed outside Dockyard becomes its own action in the plan.

Called by `planning.plan_commit` (with `refresh`) after the previews: each fleet, volume
or gateway the plan leaves alone (`noop`), owned by Git and up (`active`/`running`), is
refreshed by its engine (`Previewer.refresh`: Pulumi's `refresh --preview-only`, the local
engine's check of its directories). One whose stack differs from its recorded state is
planned `update` with `drift` set, the refresh steps as its preview and the reason
"drift: …, will restore" — applying it brings the stack up again at Git's spec. A stack
whose refresh shows every resource gone reads "was deleted outside Dockyard". The
refreshes run concurrently; a resource whose engine is unavailable, or whose refresh
fails, is left as planned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import Action, ActionKind, Rollout, StackPreview
from reconciler.engine.previewing import Previewer

UP_STATUSES = frozenset({"active", "running"})


async def drift_actions(
    actions: Sequence[Action], observed: ObservedState, previewer: Previewer
) -> list[Action]:
    """`actions` with each drifted capacity resource's `noop` turned into a drift update."""
    live = observed.by_key()
    checked = [
        a
        for a in actions
        if a.action is ActionKind.NOOP
        and not a.kind.is_run
        and a.spec is not None
        and (r := live.get(a.key)) is not None
        and r.is_managed
        and r.status in UP_STATUSES
    ]
    found = await asyncio.gather(*(previewer.refresh(a, dict(a.spec or {})) for a in checked))
    drifted = {a.key: p for a, p in zip(checked, found, strict=True) if p is not None}
    return [_restore(a, drifted[a.key]) if a.key in drifted else a for a in actions]


def _restore(action: Action, preview: StackPreview) -> Action:
    counts = ", ".join(f"{n} {op}" for op, n in preview.counts.items() if n)
    names = ", ".join(f"`{s.name}`" for s in preview.steps[:5])
    if all(step.op == "delete" for step in preview.steps):
        reason = (
            f"drift: {action.kind.value} `{action.name}` was deleted outside Dockyard (the "
            f"refresh of its stack `{preview.stack}` shows every resource gone: {names}), "
            "will restore: create it again at the spec in Git"
        )
    else:
        reason = (
            f"drift: its stack `{preview.stack}` changed outside Dockyard (its refresh shows "
            f"{counts}: {names}), will restore it to the spec in Git"
        )
    return replace(
        action,
        action=ActionKind.UPDATE,
        reason=reason,
        rollout=Rollout.IMMEDIATE,
        preview=preview,
        drift=True,
    )
