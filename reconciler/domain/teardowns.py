"""What a deleted project leaves to undo on a host: the `host_teardowns` rows as values.

Written by the project-deletion unit of work (`reconciler.adapters.db.teardowns`), read by
the teardowns worker (`reconciler.engine.workers.teardowns`), which stops the jobs on the
host and takes the project's users off its agent's key file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class TeardownHost:
    """A host as its instance row recorded it (an `AgentHost`: `AgentDirectory.address`)."""

    id: str  # the instance's id (the row itself is gone)
    name: str
    hostname: str | None
    ssh_port: int | None
    ssh_user: str | None
    agent_port: int | None
    backend: str | None
    resources: Any = None


@dataclass(frozen=True, slots=True)
class HostTeardown:
    """One host of a deleted project: which of its agent's jobs to stop."""

    id: str
    project: str
    created_at: datetime
    host: TeardownHost
    job_ids: tuple[str, ...]
    status_message: str = ""
