"""The clusters a server has (its backends file), as the plan and `backend list` see them.

Pure: built from the parsed file (`schemas.serverbackends`) and the path it was read from
(`reconciler.adapters.backendsfile` reads it at server start). Called by the previewer
(`reconciler.engine.previewing`: a `backends: [slurm]` / `[kubernetes]` fleet that no
engine serves is `blocked` with `block_reason`'s line: which file and key to add when the
project's entry lacks the backend), by the plan function (`block_cluster_runs`: a run
whose `backends:` are only such backends, and that names no `fleets:`, is blocked the same
way: a run gets no cluster allocation of its own yet) and by the API's
`backends/list` (`listing`: what the server has, with no secret: a key or kubeconfig is
named by its file or as "inline", never shown).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reconciler.core.blocking import BLOCKED_PREFIX
from reconciler.core.slurm_nodes import ClusterOffer
from reconciler.domain.plan import Action, ActionKind
from schemas.serverbackends import (
    BackendsConfig,
    KubernetesBackend,
    PrivateKey,
    ProxyJump,
    SlurmBackend,
)

CLUSTER_BACKENDS = ("slurm", "kubernetes")
_EXAMPLE = {
    "slurm": "`- type: slurm` with its `clusters:` (hostname, user, private_key, gpu_partitions)",
    "kubernetes": "`- type: kubernetes` with its `kubeconfig:`",
}


@dataclass(frozen=True, slots=True)
class ServerBackends:
    """The backends file in force: where it is (or would be) and what it says."""

    path: str
    config: BackendsConfig
    found: bool = True  # False: no file there (the server has no clusters)

    def configured(self, project: str) -> tuple[str, ...]:
        return tuple(backend.type for backend in self.config.backends_of(project))

    def block_reason(self, project: str, backends: Iterable[str]) -> str | None:
        """Why a fleet of `project` naming `backends` cannot be brought up here, for the
        cluster backends among them (None when it names none)."""
        wanted = [
            b for b in dict.fromkeys(str(x).lower() for x in backends) if b in CLUSTER_BACKENDS
        ]
        if not wanted:
            return None
        have = self.configured(project)
        missing = [b for b in wanted if b not in have]
        if missing:
            kind = missing[0]
            where = self.path if self.found else f"{self.path} (no such file yet)"
            return (
                f"backend `{kind}` is not configured for project `{project}` on this server: "
                f"add {_EXAMPLE[kind]} under `projects: - name: {project}` → `backends:` in "
                f"{where}, then restart the server (docs/backends.md)"
            )
        if wanted[0] == "slurm":  # fleets are allocated there; a run alone is not yet
            return (
                f"backend `slurm` is configured for project `{project}` in {self.path}, but "
                "a run gets no Slurm allocation of its own yet: declare a fleet with "
                "`backends: [slurm]` and name it in the run's `fleets:` (docs/slurm.md)"
            )
        return (  # kubernetes: fleets are pods (where the server has the engine); runs not
            f"backend `kubernetes` is configured for project `{project}` in {self.path}, but "
            "a run gets no pod of its own yet: declare a fleet with `backends: [kubernetes]` "
            "and name it in the run's `fleets:` (docs/kubernetes.md)"
        )

    def listing(self, project: str) -> list[dict[str, Any]]:
        """The project's cluster backends as `backends/list` returns them (no secrets)."""
        return [_describe(backend) for backend in self.config.backends_of(project)]


def describe_offers(offers: Sequence[ClusterOffer], errors: Sequence[str]) -> str:
    """What the clusters have, in one line for a plan (`cluster/partition: N nodes of …`)."""
    parts = [
        f"{o.cluster}/{o.partition}: {o.nodes} node{'s' if o.nodes != 1 else ''} of "
        + (f"{o.gpu_count}x{o.gpu_name}, " if o.gpu_count else "")
        + f"{o.cpus} CPUs, {o.memory_mib} MiB ({o.available} available now)"
        for o in offers
    ]
    text = "; ".join(parts) if parts else "no node in a configured partition"
    return text + "".join(f"; {line}" for line in errors)


def block_cluster_runs(actions: Sequence[Action], clusters: ServerBackends) -> tuple[Action, ...]:
    """`actions`, each run being created, updated or replaced whose `backends:` names only
    cluster backends (`[slurm]`, `[kubernetes]`: no instance of another backend may take
    it) blocked with `block_reason`'s line."""
    return tuple(_cluster_run(action, clusters) for action in actions)


def _cluster_run(action: Action, clusters: ServerBackends) -> Action:
    if (
        not action.kind.is_run
        or action.action not in (ActionKind.CREATE, ActionKind.UPDATE, ActionKind.REPLACE)
        or action.spec is None
    ):
        return action
    raw = action.spec.get("backends")
    named = [str(b).lower() for b in raw] if isinstance(raw, list) else []
    if not named or not all(b in CLUSTER_BACKENDS for b in named):
        return action
    if action.spec.get("fleets"):  # the fleets it names say whether it can run
        return action
    reason = clusters.block_reason(action.project, named)
    if reason is None:
        return action
    return replace(action, action=ActionKind.BLOCKED, reason=BLOCKED_PREFIX + reason)


def _key(key: PrivateKey | None) -> str | None:
    if key is None:
        return None
    return f"file {key.path}" if key.path is not None else "inline"


def _jump(jump: ProxyJump | None) -> dict[str, Any] | None:
    if jump is None:
        return None
    return {
        "hostname": jump.hostname,
        "port": jump.port,
        "user": jump.user,
        "private_key": _key(jump.private_key),
    }


def _describe(backend: SlurmBackend | KubernetesBackend) -> dict[str, Any]:
    if isinstance(backend, KubernetesBackend):
        config = backend.kubeconfig
        return {
            "type": "kubernetes",
            "kubeconfig": f"file {config.filename}" if config.filename is not None else "inline",
            "proxy_jump": _jump(backend.proxy_jump),
        }
    return {
        "type": "slurm",
        "clusters": [
            {
                "name": cluster.name,
                "hostname": cluster.hostname,
                "port": cluster.port,
                "user": cluster.user,
                "private_key": _key(cluster.private_key),
                "proxy_jump": _jump(cluster.proxy_jump),
                "gpu_partitions": {e.gpu: list(e.partitions) for e in cluster.gpu_partitions},
                "cpu_partitions": list(cluster.cpu_partitions),
                "price": cluster.price,
            }
            for cluster in backend.clusters
        ],
    }
