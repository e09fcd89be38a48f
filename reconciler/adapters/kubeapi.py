"""A Kubernetes cluster's API server, through lightkube: the client, and what the cluster has.

The client library is lightkube (typed, and it speaks through httpx, the HTTP client the
server already uses; no `kubectl` subprocess). `kube_client` builds an `AsyncClient` from
the `kubernetes` entry of the server's backends file (`kubeconfig: filename` or `data`,
its current context) over a `BoundedTransport`: every response body is counted while it is
read and cut off past `max_bytes`, so an API server that answers without end costs that
much memory, never more. Environment proxies are not used (`trust_env=False`).

`read_kube_cluster` lists the nodes in pages of `PAGE` (at most `MAX_NODES` nodes are
counted) and hands each to `reconciler.core.kube_nodes.NodeTally`, which keeps one counter
per node shape; `read_project_kube` does it for a project's entry. Called by the server's
`backends/offers` (`reconciler.web.clusteroffers`), the previewer (what the plan shows) and
the Kubernetes engine (`reconciler.engine.kubeengine`).

Errors are `KubeUnavailable`: one line naming the cluster, its API server and what failed
(the kubeconfig, connecting, the API's refusal, text it cannot read); no credential is in it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import yaml
from lightkube import ApiError, AsyncClient, ConfigError, KubeConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.resources.core_v1 import Node

from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.kube_nodes import KubeOffer, KubeParseError, NodeTally
from schemas.serverbackends import KubernetesBackend

PAGE = 500
MAX_NODES = 20_000
MAX_BYTES = 32 * 1024 * 1024  # one response: a page of 500 busy nodes is ~5 MB


class KubeUnavailable(Exception):  # noqa: N818 - a state of the cluster, as SlurmUnavailable
    """The cluster could not be read or used; the message is the line the plan shows."""


class ResponseTooLarge(httpx.TransportError):
    """The API server's answer went past the byte bound."""


class _CountedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                raise ResponseTooLarge(f"the API server answered more than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedTransport(httpx.AsyncBaseTransport):
    """httpx's transport, with each response body bounded while it is read."""

    def __init__(self, inner: httpx.AsyncBaseTransport, max_bytes: int) -> None:
        self._inner = inner
        self._max = max_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        response.stream = _CountedStream(stream, self._max)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __deepcopy__(self, memo: dict[int, Any]) -> BoundedTransport:
        return self  # lightkube deep-copies its connection parameters; an SSL context cannot be


@dataclass(frozen=True, slots=True)
class KubeTarget:
    """One cluster as the server reaches it: the client and how messages name it."""

    client: AsyncClient
    name: str  # the kubeconfig context's cluster (a dstack region)
    server: str
    namespace: str

    @property
    def where(self) -> str:
        return f"Kubernetes cluster `{self.name}` ({self.server})"


def load_kubeconfig(backend: KubernetesBackend, source: str) -> SingleConfig:
    """The kubeconfig's current context, or `KubeUnavailable` naming `source`'s key."""
    key = f"{source}: `kubeconfig`"
    try:
        if backend.kubeconfig.filename is not None:
            path = os.path.expanduser(backend.kubeconfig.filename)
            key = f"{source}: `kubeconfig.filename` ({path})"
            config = KubeConfig.from_file(path)
        else:
            key = f"{source}: `kubeconfig.data`"
            data = yaml.safe_load(backend.kubeconfig.data or "")
            if not isinstance(data, dict):
                raise ConfigError("not a kubeconfig mapping")
            config = KubeConfig.from_dict(data)
        single = config.get()
    except (ConfigError, OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise KubeUnavailable(f"{key}: not a usable kubeconfig: {exc}") from None
    if single is None or single.user is None:
        raise KubeUnavailable(f"{key}: no current context with a cluster and a user")
    return single


def kube_client(
    backend: KubernetesBackend,
    source: str,
    *,
    limit_s: float = 15.0,
    max_bytes: int = MAX_BYTES,
) -> KubeTarget:
    """A client of the backend's cluster (see the module docstring); `limit_s` bounds
    connecting and each read (a watch's reads are unbounded in time, as lightkube does)."""
    single = load_kubeconfig(backend, source)
    assert single.user is not None
    try:
        verify = verify_cluster(single.cluster, single.user, single.abs_file, trust_env=False)
    except (OSError, ValueError) as exc:
        raise KubeUnavailable(f"{source}: the kubeconfig's certificates: {exc}") from None
    transport = BoundedTransport(httpx.AsyncHTTPTransport(verify=verify), max_bytes)
    client = AsyncClient(
        single, timeout=httpx.Timeout(limit_s), trust_env=False, transport=transport
    )
    name = single.context.cluster if single.context else single.context_name
    return KubeTarget(client, str(name), str(single.cluster.server), single.namespace)


def failure(exc: BaseException) -> str:
    """What went wrong talking to the API server, in words (no credential is in them)."""
    if isinstance(exc, ApiError):
        status = exc.status
        return f"the API server refused ({status.code} {status.reason}): {status.message}"
    if isinstance(exc, ResponseTooLarge):
        return str(exc)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return f"cannot reach the API server ({exc or type(exc).__name__})"
    if isinstance(exc, httpx.HTTPError):
        return f"the API server did not answer ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"


API_ERRORS = (ApiError, httpx.HTTPError, ValueError, KeyError, TypeError)


async def read_kube_cluster(
    target: KubeTarget, known_gpus: Sequence[str], *, max_nodes: int = MAX_NODES
) -> tuple[tuple[KubeOffer, ...], str | None]:
    """(the cluster's offers, a note when only `max_nodes` nodes were counted)."""
    tally = NodeTally(target.name, tuple(known_gpus))
    try:
        async for node in target.client.list(Node, chunk_size=PAGE):
            if tally.seen >= max_nodes:
                return tally.offers(), f"{target.where}: only the first {max_nodes} nodes counted"
            tally.add(node.to_dict())  # type: ignore[no-untyped-call]
    except KubeParseError as exc:
        raise KubeUnavailable(f"{target.where}: a node Dockyard cannot read: {exc}") from None
    except API_ERRORS as exc:
        raise KubeUnavailable(f"{target.where}: {failure(exc)}") from None
    return tally.offers(), None


def project_kube_backends(
    clusters: ServerBackends, project: str
) -> list[tuple[KubernetesBackend, str]]:
    """The project's kubernetes entries with where each is in the file (for messages)."""
    found: list[tuple[KubernetesBackend, str]] = []
    for p, entry in enumerate(clusters.config.projects):
        if entry.name != project:
            continue
        for b, backend in enumerate(entry.backends):
            if isinstance(backend, KubernetesBackend):
                found.append((backend, f"{clusters.path} (projects[{p}].backends[{b}])"))
    return found


async def _read_one(
    backend: KubernetesBackend, source: str, known_gpus: Sequence[str], limit_s: float
) -> tuple[tuple[KubeOffer, ...], str | None]:
    target = kube_client(backend, source, limit_s=limit_s)
    try:
        async with asyncio.timeout(limit_s * 4):
            return await read_kube_cluster(target, known_gpus)
    except TimeoutError:
        raise KubeUnavailable(
            f"{target.where}: the node list took over {limit_s * 4:g} s"
        ) from None
    finally:
        await target.client.close()


async def read_project_kube(
    clusters: ServerBackends, project: str, known_gpus: Sequence[str], *, limit_s: float = 15.0
) -> tuple[tuple[KubeOffer, ...], tuple[str, ...]]:
    """(offers, errors) of `project`'s Kubernetes clusters; one that cannot be read is its
    `KubeUnavailable` line in errors (with the file and entry to fix), the others count."""
    entries = project_kube_backends(clusters, project)
    answers: list[Any] = await asyncio.gather(
        *(_read_one(b, source, known_gpus, limit_s) for b, source in entries),
        return_exceptions=True,
    )
    offers: list[KubeOffer] = []
    errors: list[str] = []
    for (_, source), answer in zip(entries, answers, strict=True):
        if isinstance(answer, KubeUnavailable):
            line = str(answer)
            errors.append(line if source in line else f"{line} (fix `kubeconfig` at {source})")
        elif isinstance(answer, BaseException):
            raise answer
        else:
            found, note = answer
            offers.extend(found)
            errors.extend([note] if note else [])
    return tuple(offers), tuple(errors)
