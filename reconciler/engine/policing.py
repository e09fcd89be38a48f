"""The repo policy applied to planned runs: limits, prices, budget (`core.rules`).

Called by the one plan function (`planning._pure`, so every plan: PR, reconcile, offline)
and by `unmanaged.plan_one` (`dockyard apply`, the dstack API). Limits on the spec need
nothing else; `runs.max_price` and `budget.hourly` need prices: each run is priced at its
best offer on its fleets (`costing`, the offers catalog the caller passes in: loaded once
by the server's parts at start, never read again per plan; local and SSH fleets $0), the
project's runs now are what the observed active runs cost, and a plan adds the difference
its changing runs make.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.core.policy import PolicyRules
from reconciler.core.rules import block, price_violations, violations
from reconciler.domain.kinds import Kind, ResourceKey
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import Action
from reconciler.engine.costing import estimate, price_run
from stacks.catalog import CatalogRow


def police(
    actions: Sequence[Action],
    rules: PolicyRules,
    *,
    fleets: Sequence[Mapping[str, Any]],
    observed: ObservedState,
    catalog: Sequence[CatalogRow],
    approved_by: Sequence[str] = (),
) -> tuple[Action, ...]:
    """`actions` with each changing run that breaks a rule blocked with its violations;
    `fleets` are the fleet specs the runs will be placed on, `catalog` the offers catalog
    the caller loaded once (at server start, or once per CLI command). `approved_by`: the
    approvers of an exception for this content (docs/policies.md); the runs then keep
    their action."""
    found: dict[ResourceKey, list[str]] = {
        a.key: list(violations(a, rules.runs)) for a in actions if a.action.changes
    }
    if rules.prices_runs and any(a.kind.is_run and a.action.changes for a in actions):
        for key, lines in _price_violations(actions, rules, fleets, observed, catalog).items():
            found.setdefault(key, []).extend(lines)
    return block(actions, found, approved_by)


def _price_violations(
    actions: Sequence[Action],
    rules: PolicyRules,
    fleets: Sequence[Mapping[str, Any]],
    observed: ObservedState,
    catalog: Sequence[CatalogRow],
) -> dict[ResourceKey, list[str]]:
    old_fleets = [r.spec for r in observed.resources if r.kind is Kind.FLEET]
    old_specs = {r.key: r.spec for r in observed.resources}
    cost = estimate(
        actions,
        fleets=fleets,
        old_fleets=old_fleets,
        old_specs=old_specs,
        catalog=catalog,
    )
    prices = {c.key: (c.new.per_hour if c.new else None, c.delta) for c in cost.actions}
    unpriced = [f"run {c.key.name} (planned)" for c in cost.actions if c.unmatched]
    changing = {a.key for a in actions if a.action.changes}
    running = 0.0
    for resource in observed.resources:
        if resource.kind.is_run and not resource.finished:
            price = price_run(resource.spec, old_fleets, catalog)
            running += price.per_hour if price else 0.0
            if price is None and resource.key not in changing:
                unpriced.append(f"run {resource.name} (running)")
    return price_violations(actions, rules, prices, running, unpriced)
