"""The sentence every action carries: why this action, in words a person understands (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.core.diffing import top_field
from reconciler.core.inplace import SERVICE_ROLLING, Verdict
from reconciler.domain.desired import IMPLICIT_PATH, DesiredResource
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import ObservedResource
from reconciler.domain.plan import ActionKind, FieldChange, Rollout


def _names(fields: Sequence[str]) -> str:
    return ", ".join(f"`{field}`" for field in fields)


def reason_for_create(resource: DesiredResource, live: ObservedResource | None) -> str:
    kind = resource.kind.value
    if live is not None:
        spec = " with the new spec" if live.spec_hash != resource.spec_hash else ""
        return (
            f"{kind} is {live.status}; services and dev environments are kept running: "
            f"resubmit it{spec}"
        )
    if resource.implicit:
        return (
            f"the repo declares no fleet: Dockyard adds the implicit default fleet "
            f"{resource.name!r} (this host)"
        )
    return f"new {kind} declared in {resource.path}"


def reason_for_change(
    resource: DesiredResource,
    live: ObservedResource,
    verdict: Verdict,
    changes: Sequence[FieldChange],
) -> str:
    if verdict.action is ActionKind.UPDATE:
        tops = tuple(dict.fromkeys(top_field(c.field) for c in changes))
        if verdict.rollout is Rollout.ROLLING:
            rolling = [f for f in tops if f in SERVICE_ROLLING or f == "https"]
            at_once = [f for f in tops if f not in rolling]
            reason = f"rolling update of {_names(rolling)}: replicas are replaced one at a time"
            return reason + (f"; applied at once: {_names(at_once)}" if at_once else "")
        return f"update in place, applied at once: {_names(tops)}"
    return _reason_for_replace(resource, live, verdict)


def _reason_for_replace(resource: DesiredResource, live: ObservedResource, verdict: Verdict) -> str:
    forced = _names(verdict.forced_by)
    kind = resource.kind
    if kind is Kind.VOLUME:
        return (
            f"a volume cannot change in place ({forced}): delete and re-create it; "
            "the data on the volume is lost"
        )
    if kind is Kind.TASK and live.finished:
        return (
            f"the task's spec changed since it ran ({live.status}); a task runs once per "
            "spec: run it again"
        )
    if kind is Kind.GATEWAY and live.status == "failed":
        return "the gateway has failed: delete it, then create it with the new spec"
    if kind is Kind.FLEET and verdict.forced_by == ("ssh_config",):
        return "a fleet cannot switch between cloud and SSH: delete and re-create it"
    if kind.is_run:
        return f"{forced} cannot change in place: stop the {kind.value} and submit it again"
    return f"{forced} cannot change in place: delete and re-create the {kind.value}"


def reason_for_removed(live: ObservedResource, action: ActionKind) -> str:
    kind = live.kind.value
    if action is ActionKind.NOOP:
        return f"created outside Git ({live.origin}); Dockyard never prunes what it does not own"
    if live.path == IMPLICIT_PATH:
        return f"the repo now declares fleets: the implicit default fleet {live.name!r} is deleted"
    gone = f"{live.path} was removed" if live.path else "its file was removed"
    if action is ActionKind.RETAIN:
        return (
            f"{gone}; volumes are retained (.dockyard.yml prune.volumes: retain): delete it "
            "by hand, or set prune.volumes: delete"
        )
    if live.kind is Kind.VOLUME:
        return f"{gone} and prune.volumes is delete: the volume and its data are deleted"
    if live.kind is Kind.TASK and live.finished:
        return f"{gone}: delete the finished task's record"
    if live.kind.is_run:
        return f"{gone}: stop and delete the {kind}"
    return f"{gone}: delete the {kind}"
