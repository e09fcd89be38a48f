"""The server's Kubernetes engine, built from its backends file, and one `cluster_ended` over
the cluster engines there are.

Called by `reconciler.engine.controller.build_controller`: `kube_engine` makes the
`KubernetesEngine` (`reconciler.engine.kubeengine`) when a project of the backends file has
a `kubernetes` entry; `cluster_ended_of` gives the workers one question — why did the
cluster end this instance? — asked of each cluster engine (Slurm's, Kubernetes'), each of
which answers only for the instances it made.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.core.clusterbackends import ServerBackends
from reconciler.domain.statuses import JobTerminationReason
from schemas.serverbackends import KubernetesBackend
from stacks.catalog import load_catalog

if TYPE_CHECKING:  # lightkube is loaded only where a backends file names Kubernetes
    from reconciler.engine.kubeengine import KubernetesEngine

Ended = tuple[JobTerminationReason, str] | None


def kube_engine(
    clusters: ServerBackends | None, key: Path, agent_args: Sequence[str]
) -> KubernetesEngine | None:
    """The server's Kubernetes engine, when its backends file configures Kubernetes for a
    project (`build_controller` registers it beside the Slurm engine)."""
    if clusters is None or not any(
        isinstance(backend, KubernetesBackend)
        for entry in clusters.config.projects
        for backend in entry.backends
    ):
        return None
    from reconciler.engine.kubeengine import KubernetesEngine

    gpus = sorted({row.gpu_name for row in load_catalog() if row.gpu_name})
    return KubernetesEngine(clusters, None, key, gpus, agent_args=agent_args)


def cluster_ended_of(
    *asked: Callable[[object], Awaitable[Ended]] | None,
) -> Callable[[object], Awaitable[Ended]] | None:
    """One `cluster_ended` for the workers over the cluster engines there are: each engine
    answers only for the instances it made (their record's key), None for the others."""
    engines = [ask for ask in asked if ask is not None]
    if not engines:
        return None

    async def ended(resources: object) -> Ended:
        for ask in engines:
            found = await ask(resources)
            if found is not None:
                return found
        return None

    return ended
