"""A `backends: [kubernetes]` fleet's pods: which node shape, the pod spec, and what a pod's
status means for its instance (pure, no I/O).

Called by the Kubernetes engine (`reconciler.engine.kubeengine`):

- `choose_offer`: the node shape (a `reconciler.core.kube_nodes.KubeOffer`) one node of
  the fleet is placed on: one whose nodes fit the fleet's `resources`, ready nodes first,
  then the fewest GPUs, CPUs and memory;
- `pod_manifest`: the pod of node `index` of the fleet (dstack's fields → the pod spec,
  docs/kubernetes.md): the agent in one container of the default image; CPUs and memory
  (the fleet's minimums) as requests; GPUs as the `nvidia.com/gpu` / `amd.com/gpu`
  resource (requests = limits, as Kubernetes requires for extended resources), with a node
  selector on the GPU operator's `nvidia.com/gpu.product` label of the chosen shape and a
  toleration of the GPU taint; one pod per node (anti-affinity on the fleet's label);
  `restartPolicy: Never` (a restarted agent would have lost its jobs: the pod ends and its
  instance with it); no service-account token mounted and no service links (the jobs in
  the pod get no credential of the cluster's API);
- `pod_status`: running (with its IP and node), waiting, or ended and why, as the jobs
  on the instance end with dstack's termination reason;
- `instance_output`: a running pod as the engine's outputs list an instance (its IP, the
  agent's ports and key, the backend's `proxy_jump`, and the pod the store keeps).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.core.kube_nodes import KubeOffer
from reconciler.domain.statuses import JobTerminationReason
from schemas.requirements import Range
from schemas.serverbackends import ProxyJump

MANAGED_BY = "app.kubernetes.io/managed-by"
STACK_LABEL = "dockyard.dev/stack"
NODE_LABEL = "dockyard.dev/node"
AGENT_USER = "dockyard"  # the agent's SSH server takes any user name; the key decides
AGENT_SSH_PORT = 10022
AGENT_HTTP_PORT = 10999
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
PRODUCT_LABEL = "nvidia.com/gpu.product"
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, slots=True)
class Wanted:
    """One node of the fleet, as its `resources` ask (`stacks.catalog.Requirements`)."""

    gpu_names: tuple[str, ...]
    gpu_count: Range
    cpus: Range
    memory_gib: Range


def _fits(offer: KubeOffer, wanted: Wanted) -> bool:
    """Whether a pod of the fleet's minimums fits on a node of `offer`'s shape (a pod takes
    part of a node: an 8-GPU node holds a pod of `gpu: H100:2`)."""
    if wanted.gpu_names and (offer.gpu_name or "").upper() not in wanted.gpu_names:
        return False
    if wanted.gpu_count.max == 0 and offer.gpu_count:
        return False  # `gpu: 0`: a CPU-only pod is not put on a GPU node
    return (
        offer.gpu_count >= (wanted.gpu_count.min or 0)
        and offer.cpus >= (wanted.cpus.min or 0)
        and offer.memory_mib / 1024 >= (wanted.memory_gib.min or 0)
    )


def choose_offer(offers: Sequence[KubeOffer], wanted: Wanted) -> KubeOffer | None:
    """The node shape a pod of the fleet asks for (see the module docstring)."""
    fitting = [o for o in offers if _fits(o, wanted)]
    if not fitting:
        return None
    return min(fitting, key=lambda o: (o.available == 0, o.gpu_count, o.cpus, o.memory_mib))


def dns_name(text: str, limit: int = 63) -> str:
    """`text` as a DNS-1123 label (lower case, `a-z0-9-`, at most `limit` characters); a
    hash of the whole keeps two long names that share a prefix apart."""
    clean = _NOT_DNS.sub("-", text.lower()).strip("-") or "x"
    if len(clean) <= limit and clean == text:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{clean[: limit - 9].rstrip('-')}-{digest}"


def stack_label(stack_name: str) -> str:
    """The fleet's label value (`dockyard.dev/stack`): its pods are found by it."""
    return dns_name(stack_name)


def pod_name(stack_name: str, index: int) -> str:
    return dns_name(f"dockyard-{stack_name}", 63 - len(f"-{index}")) + f"-{index}"


def agent_command(authorized_key_env: str, extra_args: Sequence[str]) -> list[str]:
    """The container's command: the agent, reached over its SSH server with the server's
    key (given in the environment, never in the image)."""
    flags = " ".join(shlex.quote(a) for a in extra_args)
    script = (
        "set -e; mkdir -p /dockyard && cd /dockyard; umask 077; "
        f'printf "%s\\n" "${authorized_key_env}" > authorized_keys; '
        f"exec python3 -s -m agent serve --data-dir /dockyard/data --http-port {AGENT_HTTP_PORT} "
        f"--ssh-port {AGENT_SSH_PORT} --ssh-host 0.0.0.0 --authorized-keys "
        f"/dockyard/authorized_keys --host-key /dockyard/host_key {flags}"
    ).strip()
    return ["/bin/sh", "-c", script]


def pod_manifest(
    *,
    stack_name: str,
    index: int,
    image: str,
    offer: KubeOffer,
    wanted: Wanted,
    authorized_key: str,
    agent_args: Sequence[str] = (),
) -> dict[str, Any]:
    """The pod of node `index` of the fleet (see the module docstring)."""
    requests: dict[str, str] = {}
    if wanted.cpus.min:
        requests["cpu"] = str(int(wanted.cpus.min))
    if wanted.memory_gib.min:
        requests["memory"] = f"{int(wanted.memory_gib.min * 1024)}Mi"
    limits: dict[str, str] = {}
    spec: dict[str, Any] = {}
    if offer.gpu_count:
        low = wanted.gpu_count.min
        resource = GPU_RESOURCE.get(offer.gpu_vendor, "nvidia.com/gpu")
        requests[resource] = limits[resource] = str(int(low) if low else offer.gpu_count)
        spec["tolerations"] = [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}]
        if offer.product and offer.gpu_vendor == "nvidia":
            spec["nodeSelector"] = {PRODUCT_LABEL: offer.product}
    label = stack_label(stack_name)
    container: dict[str, Any] = {
        "name": "agent",
        "image": image,
        "command": agent_command("DOCKYARD_AUTHORIZED_KEY", agent_args),
        "env": [{"name": "DOCKYARD_AUTHORIZED_KEY", "value": authorized_key.strip()}],
        "ports": [
            {"name": "agent-ssh", "containerPort": AGENT_SSH_PORT},
            {"name": "agent-http", "containerPort": AGENT_HTTP_PORT},
        ],
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(stack_name, index),
            "labels": {MANAGED_BY: "dockyard", STACK_LABEL: label, NODE_LABEL: str(index)},
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [container],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {STACK_LABEL: label}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
            **spec,
        },
    }


@dataclass(frozen=True, slots=True)
class PodStatus:
    """A pod as its instance sees it: `ended` (reason, message) once it cannot hold jobs."""

    name: str
    phase: str
    pod_ip: str | None = None
    node: str | None = None
    ended: tuple[JobTerminationReason, str] | None = None

    @property
    def running(self) -> bool:
        return self.ended is None and self.phase == "Running" and bool(self.pod_ip)


def pod_status(name: str, pod: Mapping[str, Any] | None) -> PodStatus:
    """What a pod's JSON (None: the API server no longer has it) means for its instance."""
    if pod is None:
        why = f"the pod {name} was deleted from the cluster"
        return PodStatus(name, "Gone", ended=(JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY, why))
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    phase = str(status.get("phase") or "Pending")
    ip = status.get("podIP") or None
    node = spec.get("nodeName") or None
    if metadata.get("deletionTimestamp"):
        why = f"the pod {name} is being deleted"
        ended = (JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY, why)
        return PodStatus(name, phase, ip, node, ended)
    if phase not in ("Succeeded", "Failed"):
        return PodStatus(name, phase, ip, node)
    reason = str(status.get("reason") or _container_reason(status) or phase)
    message = f"the pod {name} ended: {phase} ({reason})"
    if status.get("message"):
        message += f": {str(status['message'])[:300]}"
    if reason == "DeadlineExceeded":
        kind = JobTerminationReason.MAX_DURATION_EXCEEDED
    elif reason in ("Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated"):
        kind = JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY
    elif phase == "Succeeded":
        kind = JobTerminationReason.TERMINATED_BY_SERVER
    else:
        kind = JobTerminationReason.INSTANCE_UNREACHABLE
    return PodStatus(name, phase, ip, node, (kind, message))


def _container_reason(status: Mapping[str, Any]) -> str | None:
    for container in status.get("containerStatuses") or []:
        terminated = ((container or {}).get("state") or {}).get("terminated")
        if terminated:
            return f"{terminated.get('reason') or 'exited'}, exit code {terminated.get('exitCode')}"
    return None


def instance_output(
    *,
    fleet: str,
    project: str,
    index: int,
    state: PodStatus,
    uid: str | None,
    cluster: str,
    namespace: str,
    key: str,
    jump: ProxyJump | None,
) -> dict[str, Any]:
    """Node `index` of the fleet as the fleets worker records its instance."""
    return {
        "name": f"{fleet}-{index}",
        "hostname": state.pod_ip,
        "port": AGENT_SSH_PORT,
        "user": AGENT_USER,
        "agent_port": AGENT_HTTP_PORT,
        "backend": "kubernetes",
        "identity_file": key,
        "proxy_jump": None
        if jump is None
        else {
            "hostname": jump.hostname,
            "port": jump.port,
            "user": jump.user,
            "identity_file": jump.private_key.path if jump.private_key else None,
        },
        "kubernetes": {
            "project": project,
            "cluster": cluster,
            "namespace": namespace,
            "pod": state.name,
            "uid": uid,
            "node": state.node,
        },
    }
