"""The repo's run limits (`.dockyard.yml` `policy.runs`) checked on a plan (pure, no I/O).

Called by the one plan function (`reconciler.engine.planning`), so the PR plan, the
reconcile and `dockyard plan` see the same verdicts, and by `dockyard apply` / the
dstack-compatible API (`reconciler.engine.unmanaged`). A run that a create, update or
replace would bring to a spec breaking a limit is planned `blocked`, with one line per rule
it breaks (`policy: runs.max_gpus: run train asks 16 GPUs, the policy allows 8`) in its
reason and in `Action.violations`: the reconcile applies nothing of it and everything else,
and `apply` refuses it with the rule. Deletes and unchanged runs are never blocked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from reconciler.core.policy import RunLimits
from reconciler.domain.plan import Action, ActionKind

POLICY_PREFIX = "policy: "
_CHANGING = (ActionKind.CREATE, ActionKind.UPDATE, ActionKind.REPLACE)


def check_runs(actions: Sequence[Action], limits: RunLimits) -> tuple[Action, ...]:
    """`actions`, with each changing run that breaks a limit blocked with its violations."""
    checked = []
    for action in actions:
        broken = violations(action, limits) if action.action in _CHANGING else ()
        if broken:
            reason = "; ".join(broken)
            action = replace(action, action=ActionKind.BLOCKED, reason=reason, violations=broken)
        checked.append(action)
    return tuple(checked)


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
