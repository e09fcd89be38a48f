"""Whose `/dockyard approve` counts: the approvers of the *deployed* `.dockyard.yml`.

A pull request's head is written by its author, so nothing in it may widen what the
author can do: `policy.approvers` is read from `.dockyard.yml` at the project's last
applied revision (the deployed branch), like every other limit `dockyard apply` and the
dstack API enforce (`Controller.policy_rules`). A PR head naming its author as approver,
or a merge commit that adds an approver together with the run it approves, changes
nothing until that commit itself is applied.

`rules_at(source)` reads the rules at a revision from the config repo; the reconciler
(`reconciling`), the PR bots (`reconciler.pr.approving`, PR plans through `plan_live`) and
`POST plan/files` pass it to `plan_live` / `approve`, which ask it for the project's last
applied revision. With many sources, `rules_by_project` reads each project's rules from
its own source's config repo (its mirror). No revision applied yet, no config repo, or a
revision that cannot be read: no approver counts (a violating run stays blocked; change
the rule instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from reconciler.core.policy import PolicyRules, RepoPolicy
from reconciler.domain.desired import DesiredState
from reconciler.errors import DockyardError

RulesAt = Callable[[str, str | None], PolicyRules]
"""`rules(project, revision)`: the `policy:` of project `project`'s `.dockyard.yml` at
`revision` (its last applied one; None when nothing is applied yet)."""


class PolicySource(Protocol):
    def load(self, commit: str) -> tuple[DesiredState, RepoPolicy]: ...


def no_rules(project: str, revision: str | None) -> PolicyRules:
    """A server without a config repo: nothing is deployed from Git, nobody approves."""
    del project, revision
    return PolicyRules()


def rules_at(source: PolicySource | None) -> RulesAt:
    """The deployed rules read from `source` (see the module doc for what counts as none)."""
    if source is None:
        return no_rules

    def rules(project: str, revision: str | None) -> PolicyRules:
        if revision is None:
            return PolicyRules()
        try:
            _, policy = source.load(revision)
        except DockyardError:
            return PolicyRules()
        return policy.policy if policy.project == project else PolicyRules()

    return rules


def rules_by_project(
    default: RulesAt, sources: Callable[[str], PolicySource | None] | None
) -> RulesAt:
    """The deployed rules of each project from its own source's config repo (`sources`:
    the config repo of the stored source feeding a project, `SourceLoops.config_source`);
    `default` (the `--repo` one) for a project no stored source feeds."""
    if sources is None:
        return default

    def rules(project: str, revision: str | None) -> PolicyRules:
        found = sources(project)
        return (
            rules_at(found)(project, revision) if found is not None else default(project, revision)
        )

    return rules
