"""What the service proxy's route source reads about a service: its spec and the running
replicas with their instances (`Store.service_replicas`, for `engine.routes.StoreRoutes`).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.domain.inventory import InstanceRecord


@dataclass(frozen=True, slots=True)
class RunningReplica:
    """A running job of the service and the instance it runs on."""

    job_id: str
    runtime: Mapping[str, Any]
    instance: InstanceRecord


@dataclass(frozen=True, slots=True)
class ServiceReplicas:
    """A service run's spec and its running jobs, by replica and job number."""

    spec: Mapping[str, Any]
    replicas: tuple[RunningReplica, ...] = ()
