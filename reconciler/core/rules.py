"""The repo policy (`.dockyard.yml` `policy`) checked on a plan's runs (pure, no I/O).

Called by the one plan function (`reconciler.engine.planning`), so the PR plan, the
reconcile and `dockyard plan` see the same verdicts, and by `dockyard apply` / the
dstack-compatible API (`reconciler.engine.unmanaged`). A run that a create, update or
replace would bring to a spec breaking a limit is planned `blocked`, with one line per rule
it breaks (`policy: runs.max_gpus: run train asks 16 GPUs, the policy allows 8`) in its
reason and in `Action.violations`; `price_violations` judges `runs.max_price` and
`budget.hourly` from prices the engine computes (`engine/policing.py`). The reconcile
applies nothing of a blocked run and everything else, and `apply` refuses it with the rule.
Deletes and unchanged runs are never blocked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from reconciler.core.policy import PolicyRules, RunLimits
from reconciler.domain.kinds import ResourceKey
from reconciler.domain.plan import Action, ActionKind

POLICY_PREFIX = "policy: "
_CHANGING = (ActionKind.CREATE, ActionKind.UPDATE, ActionKind.REPLACE)


def block(
    actions: Sequence[Action],
    found: Mapping[ResourceKey, Sequence[str]],
    approved_by: Sequence[str] = (),
) -> tuple[Action, ...]:
    """`actions`, each changing run with violations in `found` blocked with them; with
    `approved_by` (an approval of this content), kept with its violations and approvers."""
    checked = []
    for action in actions:
        broken = tuple(found.get(action.key, ())) if action.action in _CHANGING else ()
        if broken and approved_by:
            action = replace(action, violations=broken, approved_by=tuple(approved_by))
        elif broken:
            reason = "; ".join(broken)
            action = replace(action, action=ActionKind.BLOCKED, reason=reason, violations=broken)
        checked.append(action)
    return tuple(checked)


def price_violations(
    actions: Sequence[Action],
    rules: PolicyRules,
    prices: Mapping[ResourceKey, tuple[float | None, float]],
    running: float,
    unpriced: Sequence[str] = (),
) -> dict[ResourceKey, list[str]]:
    """The `runs.max_price` and `budget.hourly` violations of the changing runs.

    `prices` maps a run to (its new $/h or None when unpriced, the $/h it adds); `running`
    is what the project's runs cost now. Over budget, each run that adds cost breaks it,
    and the line names the runs (`unpriced`: running now or planned) counted $0 for want
    of a price.
    """
    found: dict[ResourceKey, list[str]] = {}
    limit = rules.runs.max_price
    for action in actions:
        new = prices.get(action.key, (None, 0.0))[0]
        if action.action in _CHANGING and limit is not None and new is not None and new > limit:
            found.setdefault(action.key, []).append(
                f"{POLICY_PREFIX}runs.max_price: run {action.name} costs ${new:.2f}/h, "
                f"the policy allows ${limit:.2f}/h"
            )
    budget = rules.budget.hourly
    after = running + sum(added for _, added in prices.values())
    if budget is None or after <= budget:
        return found
    zero = f"; counted $0 (no price): {', '.join(unpriced[:10])}" if unpriced else ""
    zero += f" and {len(unpriced) - 10} more" if len(unpriced) > 10 else ""
    for action in actions:
        added = prices.get(action.key, (None, 0.0))[1]
        if action.action in _CHANGING and added > 0:
            found.setdefault(action.key, []).append(
                f"{POLICY_PREFIX}budget.hourly: this brings project {action.project} to "
                f"${after:.2f}/h, over its ${budget:.2f}/h budget (run {action.name} adds "
                f"${added:.2f}/h{zero})"
            )
    return found


def violations(action: Action, limits: RunLimits) -> tuple[str, ...]:
    """Each limit the run's spec breaks, as a line naming the rule (empty: none)."""
    if not action.kind.is_run or action.spec is None:
        return ()
    spec, name = action.spec, action.name
    found = [
        _gpus(spec, name, limits),
        _gpu_names(spec, name, limits),
        _backends(spec, name, limits),
        _duration(spec, name, limits),
    ]
    if not limits.privileged and spec.get("privileged"):
        found.append(f"runs.privileged: run {name} asks `privileged: true`, the policy forbids it")
    if not limits.instance_volumes and _instance_volumes(spec):
        paths = ", ".join(_instance_volumes(spec))
        found.append(
            f"runs.instance_volumes: run {name} mounts host paths ({paths}), "
            "the policy forbids them"
        )
    return tuple(POLICY_PREFIX + line for line in found if line)


def run_gpus(spec: Mapping[str, Any]) -> int:
    """GPUs of the whole run: per job (the minimum asked) times its jobs."""
    gpu = (spec.get("resources") or {}).get("gpu") or {}
    per_job = int((gpu.get("count") or {}).get("min") or 0)
    replicas = spec.get("replicas") or {}
    jobs = (
        int(replicas.get("max") or replicas.get("min") or 0) if isinstance(replicas, Mapping) else 0
    )
    return per_job * max(jobs or int(spec.get("nodes") or 1), 1)


def _gpus(spec: Mapping[str, Any], name: str, limits: RunLimits) -> str:
    asked = run_gpus(spec)
    if limits.max_gpus is None or asked <= limits.max_gpus:
        return ""
    return f"runs.max_gpus: run {name} asks {asked} GPUs, the policy allows {limits.max_gpus}"


def _gpu_names(spec: Mapping[str, Any], name: str, limits: RunLimits) -> str:
    gpu = (spec.get("resources") or {}).get("gpu") or {}
    if limits.gpus is None or not int((gpu.get("count") or {}).get("min") or 0):
        return ""
    allowed = {n.lower() for n in limits.gpus}
    asked = [str(n) for n in gpu.get("name") or ()]
    if asked and all(n.lower() in allowed for n in asked):
        return ""
    wanted = ", ".join(asked) or "any GPU (no name)"
    return f"runs.gpus: run {name} asks {wanted}, the policy allows {', '.join(limits.gpus)}"


def _backends(spec: Mapping[str, Any], name: str, limits: RunLimits) -> str:
    named = [str(b) for b in spec.get("backends") or ()]
    if limits.backends is None or all(b in limits.backends for b in named):
        return ""
    outside = ", ".join(b for b in named if b not in limits.backends)
    return (
        f"runs.backends: run {name} names {outside}, the policy allows {', '.join(limits.backends)}"
    )


def _duration(spec: Mapping[str, Any], name: str, limits: RunLimits) -> str:
    if limits.max_duration is None:
        return ""
    asked = spec.get("max_duration")
    if isinstance(asked, int) and 0 < asked <= limits.max_duration:
        return ""
    said = f"max_duration {asked}s" if isinstance(asked, int) and asked > 0 else "no max_duration"
    return (
        f"runs.max_duration: run {name} has {said}, the policy allows at most "
        f"{limits.max_duration}s (set `max_duration:`)"
    )


def _instance_volumes(spec: Mapping[str, Any]) -> list[str]:
    return [
        str(v["instance_path"])
        for v in spec.get("volumes") or ()
        if isinstance(v, Mapping) and v.get("instance_path")
    ]
