"""Properties of `plan()` (hypothesis): applying a plan converges; same inputs, same bytes.

States are drawn from a pool of real, parsed configurations: several variants (spec, file
path) of a few names of every kind, deployed with any status and origin.
"""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.planning import plan
from reconciler.core.policy import PrunePolicy, RepoPolicy
from reconciler.core.rendering_json import to_json_dict
from reconciler.core.rendering_markdown import render_markdown
from reconciler.domain.desired import DesiredResource, DesiredState
from reconciler.domain.kinds import ResourceKey
from reconciler.domain.observed import ObservedResource, ObservedState, observe_applied
from reconciler.domain.plan import ActionKind, Plan
from tests.planning.factories import resource

_TEMPLATES = [
    "type: task\nname: {n}\ncommands: [{v}]\n",
    "type: service\nname: {n}\nimage: nginx:{v}\nport: 80\nreplicas: 1\n",
    "type: service\nname: {n}\nimage: nginx\nport: 80\nreplicas: {v}\nauth: false\n",
    "type: dev-environment\nname: {n}\nide: vscode\ninactivity_duration: {v}h\n",
    "type: fleet\nname: {n}\nnodes: {v}\nbackends: [aws]\n",
    "type: fleet\nname: {n}\nnodes: 1\nplacement: cluster\nblocks: {v}\n",
    "type: volume\nname: {n}\nbackend: aws\nregion: us-east-1\nsize: {v}GB\n",
    "type: gateway\nname: {n}\nbackend: aws\nregion: us-east-1\ndomain: a{v}.io\n",
    "type: task\nname: {n}\ncommands: [run]\nvolumes: ['{n}:/data']\nfleets: [{n}]\n",
]
POOL: list[DesiredResource] = [
    replace(res, path=f"{folder}{res.name}.dstack.yml")
    for template in _TEMPLATES
    for name in ("alpha", "beta")
    for value in (1, 2)
    for folder in ("", "moved/")
    for res in [resource(template.format(n=name, v=value))]
]
STATUSES = ["running", "submitted", "done", "failed", "terminated"]


@st.composite
def desired_states(draw: st.DrawFn) -> DesiredState:
    chosen = draw(st.lists(st.sampled_from(POOL), max_size=12))
    unique = list({r.key: r for r in chosen}.values())
    return DesiredState(
        project="main", commit="new", resources=tuple(unique), config_files=len(unique)
    )


@st.composite
def observed_states(draw: st.DrawFn) -> ObservedState:
    chosen = draw(st.lists(st.sampled_from(POOL), max_size=12))
    records: dict[ResourceKey, ObservedResource] = {}
    for res in chosen:
        record = observe_applied(res, commit="old", status=draw(st.sampled_from(STATUSES)))
        if draw(st.integers(0, 4)) == 0:
            record = replace(record, origin="cli:alice", path=None, commit=None)
        records[record.key] = record
    return ObservedState(project="main", resources=tuple(records.values()))


policies = st.builds(
    lambda volumes, empty: RepoPolicy(prune=PrunePolicy(volumes=volumes, allow_empty=empty)),
    st.sampled_from(["retain", "delete"]),
    st.booleans(),
)


def apply(result: Plan, desired: DesiredState, observed: ObservedState) -> ObservedState:
    """What the store would record after carrying out every action of `result`."""
    records = {r.key: r for r in observed.resources}
    wanted = desired.by_key()
    for action in result.actions:
        if action.action is ActionKind.DELETE:
            del records[action.key]
        elif action.action in (ActionKind.CREATE, ActionKind.UPDATE, ActionKind.REPLACE):
            records[action.key] = observe_applied(wanted[action.key], commit=desired.commit)
    return ObservedState(project="main", resources=tuple(records.values()))


@settings(max_examples=300, deadline=None)
@given(desired=desired_states(), observed=observed_states(), policy=policies)
def test_planning_the_applied_state_gives_only_noop(
    desired: DesiredState, observed: ObservedState, policy: RepoPolicy
) -> None:
    first = plan(desired, observed, policy)
    if not first.ok:
        assert first.actions == ()
        return
    second = plan(desired, apply(first, desired, observed), policy)
    assert second.changes == ()
    kept = {(a.key, a.action) for a in first.actions if a.action is not ActionKind.NOOP}
    for action in second.actions:
        # a retained volume stays retained, a blocked name stays blocked; all else is noop
        assert action.action is ActionKind.NOOP or (action.key, action.action) in kept


def _json(result: Plan) -> str:
    """The plan's JSON text as `dockyard plan --json` writes it (its object, in order)."""
    return json.dumps(to_json_dict(result), ensure_ascii=False, default=str)


@settings(max_examples=200, deadline=None)
@given(
    desired=desired_states(),
    observed=observed_states(),
    policy=policies,
    seed=st.randoms(use_true_random=False),
)
def test_same_inputs_give_the_same_plan_byte_for_byte(
    desired: DesiredState, observed: ObservedState, policy: RepoPolicy, seed: object
) -> None:
    first = _json(plan(desired, observed, policy))
    shuffled_desired = list(desired.resources)
    shuffled_observed = list(observed.resources)
    seed.shuffle(shuffled_desired)  # type: ignore[attr-defined]
    seed.shuffle(shuffled_observed)  # type: ignore[attr-defined]
    again = plan(
        replace(desired, resources=tuple(shuffled_desired)),
        replace(observed, resources=tuple(shuffled_observed)),
        policy,
    )
    assert _json(again) == first
    assert _json(plan(desired, observed, policy)) == first
    assert render_markdown(again) == render_markdown(plan(desired, observed, policy))


@settings(max_examples=200, deadline=None)
@given(desired=desired_states(), observed=observed_states(), policy=policies)
def test_order_follows_references(
    desired: DesiredState, observed: ObservedState, policy: RepoPolicy
) -> None:
    result = plan(desired, observed, policy)
    position = {a.key: i for i, a in enumerate(result.actions)}
    changing = [a for a in result.actions if a.action.changes]
    assert result.actions[: len(changing)] == tuple(changing)  # passive actions come last
    by_key = {a.key: a for a in changing}
    for action in changing:
        for dependency in action.depends_on:
            used = by_key.get(dependency)
            if used is None or used.key == action.key:
                continue
            if used.action is ActionKind.DELETE:
                assert position[action.key] < position[used.key]
            elif action.action is not ActionKind.DELETE:
                assert position[used.key] < position[action.key]
