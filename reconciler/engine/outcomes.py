"""The one place that turns errors into what happens next: retry, wait, block or fail.

Every part of the shell raises typed errors — ours (`reconciler.errors`), the config
contract's (`schemas.ConfigError`), the engines' (`stacks.protocol.StackError`) and the
agent client's (`agent.client` errors). Workers and the reconcile pass never decide
policy themselves: they call `outcome_of(exc)` and act on the `Outcome` — its verdict,
the user-facing message and when to try again.
This is source-controller's `ComputeReconcileResult`, as a pure function over types.

Unknown exceptions are *not* classified (`outcome_of` returns `None`): they are bugs, and
only the outermost loop (the worker) logs them with a traceback and retries later.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agent.client import AgentError, AgentUnreachable, AgentVersionError
from agent.deploy import DeployError, DeployFailure
from agent.local import LocalAgentError
from reconciler.errors import PermanentError, TransientError, UsageError, WaitingError
from schemas.problems import ConfigError
from stacks.protocol import (
    StackBusy,
    StackFailed,
    StackProgramError,
    StackUnavailable,
    StackUnsupported,
)

STACK_FAILED_DELAY = 30.0
"""Seconds before retrying a stack operation that failed (cloud error, I/O)."""

AGENT_RETRY_DELAY = 5.0
"""Seconds before calling an agent again after a transport failure or a 5xx answer."""


class Verdict(StrEnum):
    """What the failed step means for the thing it was working on."""

    RETRY = "retry"
    """Transient: try again after `retry_after` seconds; the world may fix itself."""
    WAIT = "wait"
    """Not a failure: a precondition is pending (capacity, a dependency); check again."""
    BLOCKED = "blocked"
    """This host cannot do it (e.g. no Pulumi CLI): nothing to retry until someone acts."""
    FAILED = "failed"
    """Permanent: the same input fails the same way; a person must change something."""
    INVALID = "invalid"
    """The configuration itself is invalid; nothing is applied until a new commit."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The classified result of one failed step."""

    verdict: Verdict
    message: str
    retry_after: float | None = None
    problems: tuple[str, ...] = ()

    @property
    def retries(self) -> bool:
        """Whether the same work is tried again without any change from a person."""
        return self.retry_after is not None

    @property
    def event(self) -> str:
        """The event line recorded for this outcome."""
        prefix = {
            Verdict.RETRY: "retrying",
            Verdict.WAIT: "waiting",
            Verdict.BLOCKED: "blocked",
            Verdict.FAILED: "failed",
            Verdict.INVALID: "invalid configuration",
        }[self.verdict]
        return f"{prefix}: {self.message}"


def outcome_of(exc: BaseException) -> Outcome | None:
    """Pure: classify `exc`; `None` for exceptions no part of Dockyard raises on purpose."""
    if isinstance(exc, ConfigError):
        return _config_outcome(exc)
    if isinstance(exc, WaitingError):
        return Outcome(Verdict.WAIT, str(exc), retry_after=exc.delay)
    if isinstance(exc, TransientError):
        return Outcome(Verdict.RETRY, str(exc), retry_after=exc.delay)
    if isinstance(exc, PermanentError | UsageError):
        return Outcome(Verdict.FAILED, str(exc))
    return _stack_outcome(exc) or _agent_outcome(exc)


def _config_outcome(exc: ConfigError) -> Outcome:
    lines = tuple(problem.format() for problem in exc.problems) or (str(exc),)
    return Outcome(Verdict.INVALID, lines[0], problems=lines)


def _stack_outcome(exc: BaseException) -> Outcome | None:
    if isinstance(exc, StackBusy):
        return Outcome(Verdict.RETRY, str(exc), retry_after=exc.retry_after)
    if isinstance(exc, StackUnavailable | StackUnsupported):
        return Outcome(Verdict.BLOCKED, str(exc))
    if isinstance(exc, StackProgramError):
        return Outcome(Verdict.FAILED, str(exc))
    if isinstance(exc, StackFailed):
        return Outcome(Verdict.RETRY, str(exc), retry_after=STACK_FAILED_DELAY)
    return None


def _agent_outcome(exc: BaseException) -> Outcome | None:
    if isinstance(exc, AgentUnreachable):
        return Outcome(Verdict.RETRY, str(exc), retry_after=exc.retry_in or AGENT_RETRY_DELAY)
    if isinstance(exc, AgentVersionError):
        return Outcome(Verdict.RETRY, f"{exc}; re-deploying the agent", retry_after=1.0)
    if isinstance(exc, AgentError):
        if exc.code == "no_capacity":
            return Outcome(Verdict.WAIT, str(exc), retry_after=AGENT_RETRY_DELAY)
        if exc.status_code >= 500:
            return Outcome(Verdict.RETRY, str(exc), retry_after=AGENT_RETRY_DELAY)
        return Outcome(Verdict.FAILED, str(exc))
    if isinstance(exc, DeployError):
        if exc.failure in (DeployFailure.unreachable, DeployFailure.start_failed):
            return Outcome(Verdict.RETRY, str(exc), retry_after=STACK_FAILED_DELAY)
        return Outcome(Verdict.FAILED, str(exc))
    if isinstance(exc, LocalAgentError):
        return Outcome(Verdict.RETRY, str(exc), retry_after=STACK_FAILED_DELAY)
    return None
