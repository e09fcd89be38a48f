"""Which accounts a process job's `user:` may name: the server operator's rule, in the plan.

A run without `image:` (and without `docker: true`) may run as a process job on a host;
there `user:` would pick a local account of the host, so it may name only an account the
server's operator listed (the local fleet's `DOCKYARD_LOCAL_ALLOW_JOB_USERS`, SSH fleets'
`--ssh-allow-job-users`, passed to the agents the server deploys; root only with
`--ssh-allow-root-jobs`). In a container `user:` keeps dstack's meaning (the image's
account), so runs with an image are never judged here. The agents refuse the same jobs at
submit; this rule says so at plan time, with the file, the run, the field and the setting.

Pure: called by the one plan function (`reconciler.engine.planning._pure`) and by
`reconciler.engine.unmanaged.plan_one` (`dockyard apply`, the dstack API); the engine
builds the rule from the server's settings (`settings.Settings.job_user_rule`). A run it
refuses is planned `blocked` with the line in its violations; no approval lets it through
(it is the operator's, not the repo's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reconciler.domain.plan import Action, ActionKind

SERVER_PREFIX = "server: "
_ROOTS = ("root", "0")


@dataclass(frozen=True, slots=True)
class JobUserRule:
    """The accounts any of the server's hosts lets a process job's `user:` name."""

    allowed: frozenset[str] = frozenset()
    allow_root: bool = False
    process_jobs: bool = True  # False: every host runs image-less jobs in containers
    settings: str = "DOCKYARD_LOCAL_ALLOW_JOB_USERS, --ssh-allow-job-users"
    root_setting: str = "--ssh-allow-root-jobs"


def user_violation(action: Action, rule: JobUserRule) -> str | None:
    """Why `action`'s run may not name its `user:` (None: it may, or names none)."""
    spec: Mapping[str, Any] = action.spec or {}
    user = spec.get("user")
    if not rule.process_jobs or not isinstance(user, str) or not user:
        return None
    if spec.get("image") or spec.get("docker") is True:
        return None  # a container: `user:` is the image's account, as in dstack
    where = f"{action.path}: " if action.path else ""
    shown = user[:64].encode("unicode_escape").decode()
    if user in _ROOTS:
        if rule.allow_root:
            return None
        return (
            f"{SERVER_PREFIX}{where}run {action.name}: `user: {shown}`: this server runs no "
            f"process job as root ({rule.root_setting} is off); remove `user` to run as the "
            "job's own identity, or give the run an `image:` (in a container `user:` keeps "
            "dstack's meaning)"
        )
    if user in rule.allowed:
        return None
    listed = ", ".join(sorted(rule.allowed)) or "none"
    return (
        f"{SERVER_PREFIX}{where}run {action.name}: `user: {shown}`: a process job may run "
        f"only as an account the server's operator listed ({rule.settings}; listed: "
        f"{listed}); remove `user` to run as the job's own identity, give the run an "
        "`image:` (in a container `user:` keeps dstack's meaning), or ask the operator to "
        "list the account"
    )


def check_job_users(actions: Sequence[Action], rule: JobUserRule | None) -> tuple[Action, ...]:
    """`actions`, each changing run whose `user:` the rule refuses blocked with the line
    (None: not checked, as in an offline plan, which does not know the server's hosts)."""
    if rule is None:
        return tuple(actions)
    checked = []
    for action in actions:
        line = (
            user_violation(action, rule) if action.kind.is_run and action.action.changes else None
        )
        if line is not None:
            action = replace(
                action,
                action=ActionKind.BLOCKED,
                reason=line,
                violations=(*action.violations, line),
                approved_by=(),
            )
        checked.append(action)
    return tuple(checked)
