"""What can go wrong reading a config repo, as `reconciler.errors` classes.

Each message says what failed and what to do; none contains a token (the source scrubs
secrets from git's output before it reaches an error).
"""

from __future__ import annotations

from reconciler.errors import PermanentError, TransientError, UsageError


class UnknownBranchError(PermanentError):
    """The branch does not exist in the remote."""


class UnknownRefError(UsageError):
    """A `--ref`/`--base` that names no commit of the mirror."""


class AuthRefusedError(PermanentError):
    """The remote refused our credentials (token, SSH key) or asked for some."""


class UnreachableRemoteError(TransientError):
    """The remote could not be reached (DNS, network, no such local path)."""


class CorruptMirrorError(PermanentError):
    """The mirror clone is broken and re-cloning it once did not help."""
