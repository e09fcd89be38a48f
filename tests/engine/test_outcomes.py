"""The one error mapper: each error class gets its verdict, message and retry delay."""

from __future__ import annotations

import pytest

from reconciler.engine.outcomes import Outcome, Verdict, outcome_of
from reconciler.errors import PermanentError, TransientError, UsageError, WaitingError
from schemas.problems import ConfigError, Problem
from stacks.protocol import (
    StackBusy,
    StackFailed,
    StackProgramError,
    StackUnavailable,
    StackUnsupported,
)


@pytest.mark.parametrize(
    ("exc", "verdict", "retry_after"),
    [
        (WaitingError("no idle instance", delay=4), Verdict.WAIT, 4),
        (TransientError("lock held", delay=7), Verdict.RETRY, 7),
        (PermanentError("bad image"), Verdict.FAILED, None),
        (UsageError("unknown run"), Verdict.FAILED, None),
        (StackBusy("stack locked", retry_after=12), Verdict.RETRY, 12),
        (StackUnavailable(), Verdict.BLOCKED, None),
        (StackUnsupported("backend azure"), Verdict.BLOCKED, None),
        (StackProgramError("bad region", path="f.yml", name="gpu"), Verdict.FAILED, None),
        (StackFailed("cloud said no"), Verdict.RETRY, 30),
    ],
)
def test_each_error_class_maps_to_one_verdict(
    exc: Exception, verdict: Verdict, retry_after: float | None
) -> None:
    outcome = outcome_of(exc)
    assert outcome is not None
    assert (outcome.verdict, outcome.retry_after) == (verdict, retry_after)
    assert outcome.message == str(exc)
    assert outcome.retries is (retry_after is not None)


def test_config_error_keeps_every_problem_with_its_location() -> None:
    problems = (
        Problem("train.dstack.yml", 3, 5, "resources.gpu", "bad GPU spec"),
        Problem("train.dstack.yml", 7, 1, "comands", "unknown field", hint="commands?"),
    )
    outcome = outcome_of(ConfigError(problems))
    assert outcome == Outcome(
        Verdict.INVALID,
        "train.dstack.yml:3:5: resources.gpu: bad GPU spec",
        problems=(
            "train.dstack.yml:3:5: resources.gpu: bad GPU spec",
            "train.dstack.yml:7:1: comands: unknown field (commands?)",
        ),
    )
    assert outcome.event.startswith("invalid configuration: train.dstack.yml:3:5")
    assert not outcome.retries


def test_unknown_exceptions_are_not_classified() -> None:
    assert outcome_of(RuntimeError("bug")) is None
    assert outcome_of(KeyError("x")) is None


def test_agent_errors_separate_transport_from_answers() -> None:
    from agent.client import AgentError, AgentUnreachable
    from agent.deploy import DeployError, DeployFailure
    from agent.tunnel import UnreachableKind

    unreachable = outcome_of(AgentUnreachable("h:22", UnreachableKind.closed, "gone"))
    assert unreachable is not None and unreachable.verdict is Verdict.RETRY
    full = outcome_of(AgentError("h", 409, "no_capacity", "2 GPUs busy"))
    assert full is not None and full.verdict is Verdict.WAIT
    missing = outcome_of(AgentError("h", 404, "not_found", "no job"))
    assert missing is not None and missing.verdict is Verdict.FAILED
    crashed = outcome_of(AgentError("h", 500, "internal", "boom"))
    assert crashed is not None and crashed.verdict is Verdict.RETRY
    no_python = outcome_of(DeployError("h", DeployFailure.no_python, "3.8 only"))
    assert no_python is not None and no_python.verdict is Verdict.FAILED
    down = outcome_of(DeployError("h", DeployFailure.unreachable, "timeout"))
    assert down is not None and down.retries
