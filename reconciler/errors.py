"""The one error taxonomy of the control plane.

Config errors live in `schemas` (`schemas.ConfigError`); everything the shell raises is
one of the classes below, and `reconciler.engine.outcomes` (one place) maps them to
statuses, retries and events. The CLI prints `DockyardError` as one line and exits 1.
Messages never contain secrets.
"""

from __future__ import annotations


class DockyardError(Exception):
    """Base of every error Dockyard raises on purpose; `str()` is the user-facing line."""


class TransientError(DockyardError):
    """Retry later: the world may fix itself (network blip, lock held, rate limit)."""

    def __init__(self, message: str, *, delay: float = 5.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(DockyardError):
    """Retrying the same input will fail the same way; needs a change by a person."""


class WaitingError(TransientError):
    """Not an error yet: a precondition is pending (capacity, a dependency becoming ready)."""


class UsageError(DockyardError):
    """The command line or API call itself is wrong (bad flag, unknown name)."""


class NotFoundError(DockyardError):
    """The named thing does not exist (in this project). The API answers 400
    `resource_not_exists`, as dstack does."""


class ConflictError(DockyardError):
    """The request contradicts what exists (a duplicate name, an active run)."""


class InvalidError(DockyardError):
    """The request is well-formed but cannot be done as asked."""
