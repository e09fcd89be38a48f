"""The Kubernetes engine: a `backends: [kubernetes]` fleet with `nodes: N` is N pods.

A `stacks.protocol.Engine` (`reconciler.engine.clusterengines.kube_engine` builds it when
the server's backends file has a `kubernetes` entry; `build_controller` registers it beside
the Slurm engine) for the `kubernetes` entry of the project; it speaks to the cluster's API
server through lightkube
(`reconciler.adapters.kubeapi.kube_client`, every answer bounded):

- `up`: the node shape is chosen from the cluster's nodes (`core.kube_pods.choose_offer`
  over `adapters.kubeapi.read_kube_cluster`); each missing node of the fleet is a pod
  (`core.kube_pods.pod_manifest`: the agent in a container of the default image, GPUs as
  `nvidia.com/gpu` with the GPU operator's product label as node selector), created, then
  watched (`?watch=true` from the list's resourceVersion) until every pod runs with an IP.
  The outputs list one instance per pod: its IP and the agent's ports, and the pod
  (`kubernetes`: project, cluster, namespace, pod name and uid, node) that the instance
  keeps in the store. Pods still pending past `wait_s` are `StackBusy` (the fleet retries;
  the pods are kept); a pod that ends before it runs is deleted and `StackFailed`.
- The cluster is the state: a fleet's pods carry its label (`dockyard.dev/stack`) and are
  found by it, so a restarted server (a new engine) finds them, and a retried `up` keeps
  those that still run; ended pods and those past `nodes` are deleted.
- `destroy`: every pod of the fleet is deleted (one already gone counts as deleted).
- `instance_ended(resources)`: why the pod an instance records ended (deleted behind our
  back, a new pod under its name, Failed, evicted: `core.kube_pods.pod_status`), or None
  while it runs or the API server cannot say now.

API servers that cannot be reached or refuse are `StackFailed` (the fleets worker retries);
a project without a `kubernetes` entry is `StackUnavailable` with the line to add.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncssh
from lightkube import ApiError
from lightkube.core.client import LabelSelector
from lightkube.resources.core_v1 import Pod

from reconciler.adapters.kubeapi import (
    API_ERRORS,
    KubeTarget,
    KubeUnavailable,
    failure,
    kube_client,
    project_kube_backends,
    read_kube_cluster,
)
from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.dstack_wire import DEFAULT_IMAGE
from reconciler.core.kube_nodes import KubeOffer
from reconciler.core.kube_pods import (
    NODE_LABEL,
    STACK_LABEL,
    PodStatus,
    Wanted,
    choose_offer,
    instance_output,
    pod_manifest,
    pod_name,
    pod_status,
    stack_label,
)
from reconciler.domain.statuses import JobTerminationReason
from schemas.serverbackends import KubernetesBackend
from stacks.catalog import requirements_from_spec
from stacks.programs.config import node_count
from stacks.protocol import (
    Availability,
    EngineName,
    StackBusy,
    StackFailed,
    StackOutputs,
    StackPlan,
    StackResource,
    StackStep,
    StackUnavailable,
    StepOp,
)

AGENT_USER = "dockyard"  # the agent's SSH server takes any user name; the key decides
MAX_PODS = 1000  # pods of one fleet listed at most (a fleet has `nodes` of them)
STEP_TYPE = "kubernetes:pod"
Client = Callable[[KubernetesBackend, str], KubeTarget]


class KubernetesEngine:
    """The engine of `backends: [kubernetes]` fleets (see the module docstring)."""

    name: EngineName = "kubernetes"

    def __init__(
        self,
        clusters: ServerBackends,
        authorized_key: str | None,
        key: Path,
        known_gpus: Sequence[str],
        *,
        image: str = DEFAULT_IMAGE,
        agent_args: Sequence[str] = (),
        wait_s: float = 120.0,
        client: Client = kube_client,
    ) -> None:
        self._clusters = clusters
        self._authorized_key = authorized_key  # the server's public key, for the agent
        # (None: read from `key` when the first pod is made)
        self._key = key  # ... and its private key file, which the instances record
        self._known_gpus = tuple(known_gpus)
        self._image = image
        self._agent_args = tuple(agent_args)
        self._wait_s = wait_s
        self._client = client
        self._locks: dict[str, asyncio.Lock] = {}

    def available(self) -> Availability:
        return Availability(True)

    # -- the cluster ----------------------------------------------------------------------

    def _backend(self, project: str) -> tuple[KubernetesBackend, str]:
        found = project_kube_backends(self._clusters, project)
        if not found:
            reason = self._clusters.block_reason(project, ["kubernetes"])
            raise StackUnavailable(reason or f"no kubernetes backend for project `{project}`")
        return found[0]

    @asynccontextmanager
    async def _target(self, project: str) -> AsyncIterator[KubeTarget]:
        backend, source = self._backend(project)
        try:
            target = self._client(backend, source)
        except KubeUnavailable as exc:
            raise StackFailed(str(exc)) from None
        try:
            yield target
        finally:
            await target.client.close()

    async def _pods(self, target: KubeTarget, resource: StackResource) -> dict[int, Any]:
        """The fleet's pods by node index (their JSON), found by the fleet's label."""
        return (await self._listed(target, resource))[0]

    async def _listed(
        self, target: KubeTarget, resource: StackResource
    ) -> tuple[dict[int, Any], str]:
        """`_pods`, and the list's resourceVersion (a watch from it misses no change)."""
        found: dict[int, Any] = {}
        labels: LabelSelector = {STACK_LABEL: stack_label(resource.stack_name)}
        try:
            listing = target.client.list(
                Pod, namespace=target.namespace, labels=labels, chunk_size=100
            )
            async for pod in listing:
                data = pod.to_dict()  # type: ignore[no-untyped-call]
                index = str(data["metadata"].get("labels", {}).get(NODE_LABEL, ""))
                if index.isdigit():
                    found[int(index)] = data
                if len(found) > MAX_PODS:
                    raise StackFailed(f"{target.where}: more than {MAX_PODS} pods of one fleet")
            version = listing.resourceVersion
        except API_ERRORS as exc:
            raise StackFailed(f"{target.where}: listing the fleet's pods: {failure(exc)}") from None
        return found, version

    async def _choose(self, target: KubeTarget, resource: StackResource) -> KubeOffer:
        try:
            req = requirements_from_spec(resource.spec)
        except ValueError as exc:
            raise StackFailed(f"{resource.label}: {exc}") from None
        wanted = Wanted(req.gpu_names, req.gpu_count, req.cpus, req.memory_gib)
        try:
            offers, _ = await read_kube_cluster(target, self._known_gpus)
        except KubeUnavailable as exc:
            raise StackFailed(str(exc)) from None
        offer = choose_offer(offers, wanted)
        if offer is None:
            raise StackFailed(
                f"{resource.label}: no node of {target.where} fits the fleet's resources "
                f"(gpu {req.gpu_count} {'/'.join(req.gpu_names)}, cpu {req.cpus}, "
                f"memory {req.memory_gib}GB)"
            )
        return offer

    def _wanted(self, resource: StackResource) -> Wanted:
        req = requirements_from_spec(resource.spec)
        return Wanted(req.gpu_names, req.gpu_count, req.cpus, req.memory_gib)

    async def _delete(self, target: KubeTarget, name: str) -> None:
        try:
            await target.client.delete(Pod, name, namespace=target.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise StackFailed(f"{target.where}: deleting pod {name}: {failure(exc)}") from None
        except API_ERRORS as exc:
            raise StackFailed(f"{target.where}: deleting pod {name}: {failure(exc)}") from None

    # -- the engine -----------------------------------------------------------------------

    async def preview(self, resource: StackResource) -> StackPlan:
        """The pods `up` would make, on which node shape; the plan is blocked with the
        reason (and the backends file's entry) when the cluster cannot answer."""
        _, source = self._backend(resource.project)
        try:
            async with self._target(resource.project) as target:
                offer = await self._choose(target, resource)
                pods = await self._pods(target, resource)
        except StackFailed as exc:
            raise StackUnavailable(f"{exc} (fix `kubeconfig` at {source})") from None
        where = f"{offer.cluster}/{offer.pool}: {offer.instance_type}"
        steps = tuple(
            StackStep(
                StepOp.SAME if i in pods else StepOp.CREATE,
                f"pod/{pod_name(resource.stack_name, i)}",
                STEP_TYPE,
                (where,),
            )
            for i in range(node_count(resource.spec, resource.nodes))
        )
        return StackPlan(
            resource.stack_name, steps, {"create": sum(s.op is StepOp.CREATE for s in steps)}
        )

    async def up(self, resource: StackResource) -> StackOutputs:
        lock = self._locks.setdefault(resource.stack_name, asyncio.Lock())
        async with lock, self._target(resource.project) as target:
            return await self._up(target, resource)

    async def _up(self, target: KubeTarget, resource: StackResource) -> StackOutputs:
        count = node_count(resource.spec, resource.nodes)
        pods = await self._pods(target, resource)
        for index, data in sorted(pods.items()):
            name = data["metadata"]["name"]
            if index >= count or pod_status(name, data).ended is not None:
                await self._delete(target, name)
                del pods[index]
        missing = [i for i in range(count) if i not in pods]
        if missing:
            offer = await self._choose(target, resource)
            wanted = self._wanted(resource)
            if self._authorized_key is None:
                private = asyncssh.read_private_key(str(self._key))
                self._authorized_key = private.export_public_key().decode().strip()
            for index in missing:
                manifest = pod_manifest(
                    stack_name=resource.stack_name,
                    index=index,
                    image=self._image,
                    offer=offer,
                    wanted=wanted,
                    authorized_key=self._authorized_key or "",
                    agent_args=self._agent_args,
                )
                pods[index] = await self._create(target, manifest)
        running = await self._running(target, resource, pods)
        backend, _ = self._backend(resource.project)
        return {
            "instances": [
                instance_output(
                    fleet=resource.name,
                    project=resource.project,
                    index=index,
                    state=running[index],
                    uid=pods[index]["metadata"].get("uid"),
                    cluster=target.name,
                    namespace=target.namespace,
                    key=str(self._key),
                    jump=backend.proxy_jump,
                )
                for index in sorted(running)
            ]
        }

    async def _create(self, target: KubeTarget, manifest: dict[str, Any]) -> Any:
        name = manifest["metadata"]["name"]
        try:
            metadata = {**manifest["metadata"], "namespace": target.namespace}
            pod: Pod = Pod.from_dict({**manifest, "metadata": metadata})  # type: ignore[no-untyped-call]
            created = await target.client.create(pod)
        except API_ERRORS as exc:
            raise StackFailed(f"{target.where}: creating pod {name}: {failure(exc)}") from None
        return created.to_dict()  # type: ignore[no-untyped-call]

    async def _running(
        self, target: KubeTarget, resource: StackResource, pods: Mapping[int, Any]
    ) -> dict[int, PodStatus]:
        """Watch the fleet's pods until each runs (see the module docstring)."""
        by_name = {data["metadata"]["name"]: index for index, data in pods.items()}
        try:
            now, version = await self._listed(target, resource)
        except StackFailed as exc:
            raise StackFailed(f"{exc} (while waiting for the fleet's pods to run)") from None
        states = {
            i: pod_status(d["metadata"]["name"], now.get(i) if i in now else None)
            for i, d in pods.items()
        }
        deadline = time.monotonic() + self._wait_s
        labels: LabelSelector = {STACK_LABEL: stack_label(resource.stack_name)}
        try:
            async with asyncio.timeout_at(asyncio.get_running_loop().time() + self._wait_s):
                while not all(s.running for s in states.values()):
                    await self._ended_before_running(target, resource, states)
                    events = target.client.watch(
                        Pod, namespace=target.namespace, labels=labels, resource_version=version
                    )
                    async with aclosing(events):  # type: ignore[type-var]
                        async for kind, pod in events:
                            data = pod.to_dict()  # type: ignore[no-untyped-call]
                            name = data["metadata"]["name"]
                            index = by_name.get(name)
                            if index is None:
                                continue
                            states[index] = pod_status(name, None if kind == "DELETED" else data)
                            await self._ended_before_running(target, resource, states)
                            if all(s.running for s in states.values()):
                                break
        except TimeoutError:
            waiting = ", ".join(f"{s.name} {s.phase}" for s in states.values() if not s.running)
            raise StackBusy(
                f"{resource.label}: pods not running after {self._wait_s:g} s: {waiting}",
                retry_after=10.0,
            ) from None
        except API_ERRORS as exc:
            left = max(0.0, deadline - time.monotonic())
            raise StackFailed(
                f"{target.where}: watching the fleet's pods ({left:.0f} s of the wait left): "
                f"{failure(exc)}"
            ) from None
        return states

    async def _ended_before_running(
        self, target: KubeTarget, resource: StackResource, states: Mapping[int, PodStatus]
    ) -> None:
        for state in states.values():
            if state.ended is not None:
                await self._delete(target, state.name)  # a retry makes a new one
                raise StackFailed(f"{resource.label}: {state.ended[1]} before its agent ran")

    async def refresh(self, resource: StackResource) -> StackPlan:
        """A pod of the fleet that ended or is gone is drift (a delete step)."""
        async with self._target(resource.project) as target:
            pods = await self._pods(target, resource)
        count = node_count(resource.spec, resource.nodes)
        steps = tuple(
            StackStep(StepOp.DELETE, f"pod/{pod_name(resource.stack_name, i)}", STEP_TYPE)
            for i in range(count)
            if i not in pods or pod_status(pod_name(resource.stack_name, i), pods[i]).ended
        )
        return StackPlan(resource.stack_name, steps, {"delete": len(steps)} if steps else {})

    async def preview_destroy(self, resource: StackResource) -> StackPlan:
        async with self._target(resource.project) as target:
            pods = await self._pods(target, resource)
        steps = tuple(
            StackStep(StepOp.DELETE, f"pod/{d['metadata']['name']}", STEP_TYPE)
            for _, d in sorted(pods.items())
        )
        return StackPlan(resource.stack_name, steps, {"delete": len(steps)} if steps else {})

    async def destroy(self, resource: StackResource) -> None:
        """Delete every pod of the fleet."""
        async with self._target(resource.project) as target:
            for _, data in sorted((await self._pods(target, resource)).items()):
                await self._delete(target, data["metadata"]["name"])

    async def instance_ended(self, resources: object) -> tuple[JobTerminationReason, str] | None:
        """Why the pod an instance records (`resources.kubernetes`) ended, or None while it
        runs (or the API server cannot say now)."""
        record = resources.get("kubernetes") if isinstance(resources, Mapping) else None
        if not isinstance(record, Mapping) or not record.get("pod"):
            return None
        name, uid = str(record["pod"]), record.get("uid")
        try:
            async with self._target(str(record.get("project"))) as target:
                try:
                    pod = await target.client.get(Pod, name, namespace=target.namespace)
                    data: Any = pod.to_dict()  # type: ignore[no-untyped-call]
                except ApiError as exc:
                    if exc.status.code != 404:
                        return None
                    data = None
        except (StackFailed, StackUnavailable, *API_ERRORS):
            return None
        if data is not None and uid and data["metadata"].get("uid") != uid:
            data = None  # a pod of the same name made since is not the instance's
        return pod_status(name, data).ended
