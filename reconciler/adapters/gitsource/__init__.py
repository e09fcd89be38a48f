"""The git source: mirror clone, fetch, immutable snapshots, parse cache by blob SHA.

Public API: `GitSource`, `RepoLocation`, `location_from_env`, `Snapshot`,
`LoadedSnapshot`, and the errors of `errors.py`.
"""

from reconciler.adapters.gitsource.documents import DocumentCache, LoadedSnapshot, load_snapshot
from reconciler.adapters.gitsource.errors import (
    AuthRefusedError,
    CorruptMirrorError,
    UnknownBranchError,
    UnknownRefError,
    UnreachableRemoteError,
)
from reconciler.adapters.gitsource.remotes import RepoLocation, location_from_env
from reconciler.adapters.gitsource.snapshots import Snapshot
from reconciler.adapters.gitsource.source import GitSource

__all__ = [
    "AuthRefusedError",
    "CorruptMirrorError",
    "DocumentCache",
    "GitSource",
    "LoadedSnapshot",
    "RepoLocation",
    "Snapshot",
    "UnknownBranchError",
    "UnknownRefError",
    "UnreachableRemoteError",
    "load_snapshot",
    "location_from_env",
]
