"""Where a run's jobs run now, as the callers that talk to their agents read it: the service
proxy's route source (a service's spec and its running replicas with their instances,
`Store.service_replicas`, for `engine.routes.StoreRoutes`) and metrics sampling (one running
job and its instance, `Store.running_job`, for `engine.jobsampling`). Pure: no I/O.
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
class RunningJob:
    """A running job (its agent-side id) and the instance it runs on."""

    agent_job_id: str
    instance: InstanceRecord


@dataclass(frozen=True, slots=True)
class ServiceReplicas:
    """A service run's spec and its running jobs, by replica and job number."""

    spec: Mapping[str, Any]
    replicas: tuple[RunningReplica, ...] = ()
