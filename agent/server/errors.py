"""The agent's errors: each carries the protocol error code and the HTTP status it maps to."""

from __future__ import annotations

from agent.protocol import ErrorCode

_HTTP_STATUS = {
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.NO_CAPACITY: 409,
    ErrorCode.JOB_ACTIVE: 409,
    ErrorCode.EXECUTOR_UNAVAILABLE: 409,
    ErrorCode.INTERNAL: 500,
}


class AgentError(Exception):
    """A request the agent refuses; the HTTP app renders it as ``ErrorBody``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS[self.code]


class EngineUnavailableError(Exception):
    """The container engine does not answer now; the job is not lost, ask again later."""
