"""The repo policy's run limits (`.dockyard.yml` `policy.runs`, `core.rules`), pure: each
rule in the form a run breaks it, its line naming the rule, and what is never blocked."""

from __future__ import annotations

from reconciler.core.policy import RepoPolicy, RunLimits, parse_policy
from reconciler.core.rules import block, violations
from reconciler.domain.kinds import Kind
from reconciler.domain.plan import Action, ActionKind
from schemas import parse_config


def run(text: str, action: ActionKind = ActionKind.CREATE) -> Action:
    model = parse_config(text, "x.dstack.yml")
    kind = Kind.TASK if model.type == "task" else Kind.SERVICE
    return Action(
        action,
        kind,
        str(model.name),
        "main",
        "x.dstack.yml",
        "new",
        spec=model.normalized(),
        spec_hash=model.spec_hash(),
    )


TRAIN = (
    "type: task\nname: train\ncommands: [python train.py]\nnodes: 2\nresources:\n  gpu: H100:8\n"
)


def test_every_rule_names_itself_and_says_what_was_asked() -> None:
    limits = RunLimits(
        max_gpus=8,
        gpus=("A100",),
        backends=("aws",),
        max_duration=3600,
        privileged=False,
        instance_volumes=False,
    )
    text = TRAIN + "backends: [gcp]\nprivileged: true\nmax_duration: 2h\nvolumes: [/data:/data]\n"
    found = violations(run(text), limits)
    assert found == (
        "policy: runs.max_gpus: run train asks 16 GPUs, the policy allows 8",
        "policy: runs.gpus: run train asks H100, the policy allows A100",
        "policy: runs.backends: run train names gcp, the policy allows aws",
        "policy: runs.max_duration: run train has max_duration 7200s, the policy allows at most "
        "3600s (set `max_duration:`)",
        "policy: runs.privileged: run train asks `privileged: true`, the policy forbids it",
        "policy: runs.instance_volumes: run train mounts host paths (/data), "
        "the policy forbids them",
    )


def test_a_run_within_the_limits_and_no_limits_pass() -> None:
    limits = RunLimits(max_gpus=16, gpus=("H100",), max_duration=7200)
    assert violations(run(TRAIN + "max_duration: 1h\n"), limits) == ()
    assert violations(run(TRAIN), RunLimits()) == ()


def test_a_service_counts_its_most_replicas_and_no_duration_breaks_max_duration() -> None:
    service = (
        "type: service\nname: llm\nport: 8000\ncommands: [serve]\nreplicas: 1..4\n"
        "scaling: {metric: rps, target: 10}\nresources:\n  gpu: 2\n"
    )
    found = violations(run(service), RunLimits(max_gpus=4, max_duration=3600))
    assert found[0] == "policy: runs.max_gpus: run llm asks 8 GPUs, the policy allows 4"
    assert "run llm has no max_duration" in found[1]


def test_only_changing_runs_are_blocked_and_keep_their_violations() -> None:
    limits = RunLimits(max_gpus=1)

    def named(name: str, action: ActionKind = ActionKind.CREATE, text: str = TRAIN) -> Action:
        return run(text.replace("name: train", f"name: {name}"), action)

    small = TRAIN.replace("H100:8", "H100:1").replace("nodes: 2", "nodes: 1")
    actions = [
        named("big"),
        named("gone", ActionKind.DELETE),
        named("same", ActionKind.NOOP),
        named("small", text=small),
    ]
    checked = block(actions, {a.key: violations(a, limits) for a in actions})
    assert [a.action for a in checked] == [
        ActionKind.BLOCKED,
        ActionKind.DELETE,
        ActionKind.NOOP,
        ActionKind.CREATE,
    ]
    assert checked[0].violations == (
        "policy: runs.max_gpus: run big asks 16 GPUs, the policy allows 1",
    )
    assert checked[0].reason == checked[0].violations[0]


def test_the_policy_section_is_validated_with_its_line() -> None:
    good = parse_policy("policy:\n  runs:\n    max_gpus: 8\n    max_duration: 24h\n")
    assert isinstance(good, RepoPolicy) and good.policy.runs.max_duration == 86400
    bad = parse_policy("project: main\npolicy:\n  runs:\n    max_gpu: 8\n")
    assert isinstance(bad, list)
    assert (bad[0].line, bad[0].field) == (4, "policy.runs.max_gpu")
