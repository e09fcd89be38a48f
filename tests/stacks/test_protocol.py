"""The protocol's pure parts: engine selection, stack names, plan helpers, error texts."""

from __future__ import annotations

from typing import Any

import pytest

from stacks.protocol import (
    PULUMI_NOT_FOUND,
    StackPlan,
    StackProgramError,
    StackResource,
    StackStep,
    StackUnavailable,
    StepOp,
    select_engine,
)


@pytest.mark.parametrize(
    ("kind", "spec", "engine"),
    [
        ("fleet", {"nodes": {"min": 1}}, "local"),
        ("fleet", {"backends": ["local"]}, "local"),
        ("fleet", {"ssh_config": {"hosts": ["10.0.0.1"]}}, "local"),
        ("fleet", {"backends": ["aws"]}, "pulumi"),
        ("fleet", {"backends": ["AWS", "gcp"]}, "pulumi"),
        ("volume", {"backend": "aws", "region": "us-east-1"}, "pulumi"),
        ("volume", {"backend": "local"}, "local"),
        ("gateway", {"backend": "gcp"}, "pulumi"),
        ("gateway", {"domain": "example.com"}, "local"),
    ],
)
def test_select_engine(kind: str, spec: dict[str, Any], engine: str) -> None:
    choice = select_engine(kind, spec)
    assert choice.engine == engine
    assert choice.message == ""


def test_select_engine_unknown_backend_names_it() -> None:
    choice = select_engine("fleet", {"backends": ["aws", "runpod"]})
    assert choice.engine is None
    assert "runpod" in choice.message
    assert "aws" not in choice.message.split(":")[0]


def test_select_engine_refuses_mixed_local_and_cloud() -> None:
    choice = select_engine("fleet", {"backends": ["local", "gcp"]})
    assert choice.engine is None
    assert "mixed" in choice.message


def test_stack_name_and_label() -> None:
    res = StackResource("main", "fleet", "gpu", "fleets/gpu.dstack.yml", {})
    assert res.stack_name == "main-fleet-gpu"
    assert res.label == "fleet 'gpu' (fleets/gpu.dstack.yml)"


def test_plan_changes_skip_same_steps() -> None:
    plan = StackPlan(
        "s",
        (
            StackStep(StepOp.SAME, "sg", "aws:ec2/securityGroup:SecurityGroup"),
            StackStep(StepOp.UPDATE, "node-0", "aws:ec2/instance:Instance", ("tags",)),
        ),
    )
    assert [s.name for s in plan.changes] == ["node-0"]
    assert not plan.is_noop
    assert plan.to_json()["steps"][0]["diffs"] == ["tags"]
    assert StackPlan("s", plan.steps[:1]).is_noop


def test_error_texts() -> None:
    assert str(StackUnavailable()) == (
        "Pulumi CLI not found: install it (https://www.pulumi.com/docs/install/) "
        "or use SSH/local fleets"
    )
    assert str(StackUnavailable()) == PULUMI_NOT_FOUND
    err = StackProgramError("unknown zone", path="fleets/gpu.dstack.yml", name="gpu")
    assert (err.path, err.name) == ("fleets/gpu.dstack.yml", "gpu")
    assert str(err) == "fleets/gpu.dstack.yml: gpu: unknown zone"
