"""Where a service's traffic goes: the store-backed `RouteSource` of the service proxy.

`reconciler.web.proxy.ServiceProxy` asks for a service's route on each request; this
reads the run, its ready replicas and their instances from the store in one transaction
(`Store.service_replicas`, in a thread) and
caches the answer for a fraction of a second, so a burst of requests costs one query.
Replicas leave the route as soon as they stop being ready or start terminating.

A replica on this server's own local agent (a `local` instance whose SSH endpoint is
127.0.0.1 at the port `local_ssh_port()` reports for this server's agent) is marked
`direct`: the proxy dials its loopback port instead of tunnelling through SSH to the same
host. A replica on a host reached through its own sshd (not a `local` instance) carries the
agent's port (`Upstream.agent_port`): the proxy asks that agent who holds the job's port
before it opens a channel (`agent.server.portholders`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from reconciler.adapters.db.readmodels.runs import agent_ports as agent_ports
from reconciler.adapters.db.store import Store
from reconciler.core.jobspecs import container_ports
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.service_routes import ServiceRoute, Upstream


class StoreRoutes:
    """`RouteSource` over the store; see the module docstring."""

    def __init__(
        self,
        store: Store,
        agents: AgentDirectory,
        *,
        ttl: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        local_ssh_port: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._local_ssh_port = local_ssh_port
        self._store = store
        self._agents = agents
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, ServiceRoute | None]] = {}
        self._loading: dict[tuple[str, str], asyncio.Task[ServiceRoute | None]] = {}

    async def route(self, project: str, run_name: str) -> ServiceRoute | None:
        key = (project, run_name)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        # One load per service at a time: a burst of requests after the cache expires
        # waits for the same query instead of sending one each.
        task = self._loading.get(key)
        if task is None:
            task = asyncio.create_task(asyncio.to_thread(self.load, project, run_name))
            self._loading[key] = task
            task.add_done_callback(lambda _: self._loading.pop(key, None))
        route = await asyncio.shield(task)
        self._cache[key] = (self._clock(), route)
        return route

    def load(self, project: str, run_name: str) -> ServiceRoute | None:
        found = self._store.service_replicas(project, run_name)
        if found is None:
            return None
        spec = found.spec
        ports = container_ports(spec)
        upstreams = []
        local_port = self._local_ssh_port()
        for replica in found.replicas:
            runtime, instance = replica.runtime, replica.instance
            if not runtime.get("ready") or not ports:
                continue
            host_port = int((runtime.get("ports") or {}).get(str(ports[0]), ports[0]))
            if host_port in agent_ports(instance):
                continue  # a service declaring the agent's port gets no traffic to it
            address = self._agents.address(instance)
            target = address.target
            direct = (
                instance.backend == "local"
                and target.hostname == "127.0.0.1"
                and target.port == local_port
            )
            ask = None if instance.backend == "local" else address.agent_port  # via sshd
            upstreams.append(Upstream(target, host_port, replica.job_id, direct, ask))
        return ServiceRoute(
            project=project,
            run_name=run_name,
            auth=spec.get("auth", True) is not False,
            strip_prefix=spec.get("strip_prefix", True) is not False,
            upstreams=tuple(upstreams),
        )
