"""A Kubernetes API emulator: a real HTTP server on loopback speaking the API's wire protocol
for the subset Dockyard uses, so the Kubernetes backend is tested through its real client
(lightkube over httpx) with no API server on these machines.

What it serves (JSON as the API server writes it; `Status` objects for errors; a bearer
token checked on every request, 401 otherwise):

- `GET /api/v1/nodes` (`limit`/`continue` pages): the nodes the test added (`add_node`:
  allocatable cpu/memory/`nvidia.com/gpu`, the GPU operator's `nvidia.com/gpu.product` and
  `nvidia.com/gpu.memory` labels, Ready or not, cordoned or not);
- pods: `POST`, `GET` one, `GET` a list (`labelSelector` `k=v,…`, pages), `DELETE`, and
  `?watch=true` (one JSON event per line: ADDED/MODIFIED/DELETED from `resourceVersion`,
  the existing pods as ADDED first when it is absent or `0`; `timeoutSeconds` ends it);
- `GET …/pods/NAME/log` (`follow=true` streams lines the test appends until the pod ends).

A created pod stays `Pending`; the test moves it (`set_phase`: Running with a pod IP and a
node, Succeeded, Failed with a reason), deletes it behind the client's back
(`remove_pod`), and makes the whole API server disappear (`go_down`: the port refuses,
open watches and log streams end) and come back on the same port (`come_back`). The API
server's own behaviour beyond this (scheduling, kubelets, containers, admission) is not
emulated: a pod never runs anything.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.services.kubestate import TERMINAL, TOKEN, KubeState, timestamp


def _status(code: int, reason: str, message: str) -> JSONResponse:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return JSONResponse(body, status_code=code)


def _selected(labels: Mapping[str, str], selector: str | None) -> bool:
    for term in (selector or "").split(","):
        term = term.strip()
        if not term:
            continue
        key, eq, value = term.partition("=")
        if not eq:
            if key not in labels:
                return False
        elif labels.get(key.rstrip("!")) != value.lstrip("="):
            return False
    return True


class KubeApi(KubeState):
    """The emulator: its state (`KubeState`) served over HTTP (see the module docstring)."""

    def __init__(self, token: str = TOKEN) -> None:
        super().__init__(token)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- serving --------------------------------------------------------------------------

    def start(self, port: int = 0) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app(), log_level="error", lifespan="off", timeout_graceful_shutdown=2
        )
        server = uvicorn.Server(config)
        self._server, self._stopping = server, False
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._changed = asyncio.Event()
            loop.call_soon(ready.set)
            try:
                loop.run_until_complete(server.serve(sockets=[sock]))
            finally:
                loop.close()
                sock.close()

        self._thread = threading.Thread(target=run, name="kubeapi", daemon=True)
        self._thread.start()
        ready.wait(10)
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the Kubernetes API emulator did not start")
            self._thread.join(0.01)

    def go_down(self) -> None:
        """The API server disappears: open streams end, the port refuses connections."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        with self._lock:
            self._stopping = True
            self._wake()
        server.should_exit = True
        thread.join(15)
        self._server = self._thread = None

    def come_back(self) -> None:
        """The API server is back on the same port with the same objects."""
        self.start(self.port)

    def kubeconfig(
        self, path: Path, *, token: str | None = None, namespace: str = "default"
    ) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "emulated",
                    "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
                    "users": [{"name": "tester", "user": {"token": token or self.token}}],
                    "contexts": [
                        {
                            "name": "emulated",
                            "context": {
                                "cluster": "emulated",
                                "user": "tester",
                                "namespace": namespace,
                            },
                        }
                    ],
                }
            )
        )
        return path

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    def app(self) -> Starlette:
        async def guard(request: Request) -> Response | None:
            self.requests.append(f"{request.method} {request.url.path}?{request.url.query}")
            if not self._authorized(request):
                return _status(401, "Unauthorized", "Unauthorized")
            return None

        async def nodes(request: Request) -> Response:
            if (denied := await guard(request)) is not None:
                return denied
            with self._lock:
                items = [json.loads(json.dumps(n)) for n in self.nodes]
                version = self._version
            return JSONResponse(_page("NodeList", items, request, version))

        async def pods(request: Request) -> Response:
            if (denied := await guard(request)) is not None:
                return denied
            namespace = request.path_params["namespace"]
            if request.method == "POST":
                return await self._create(request, namespace)
            selector = request.query_params.get("labelSelector")
            if request.query_params.get("watch") in ("true", "1"):
                return StreamingResponse(
                    self._watch(request, namespace, selector), media_type="application/json"
                )
            with self._lock:
                items = [
                    json.loads(json.dumps(p))
                    for (ns, _), p in self._pods.items()
                    if ns == namespace and _selected(p["metadata"].get("labels", {}), selector)
                ]
                version = self._version
            return JSONResponse(_page("PodList", items, request, version))

        async def pod(request: Request) -> Response:
            if (denied := await guard(request)) is not None:
                return denied
            key = (request.path_params["namespace"], request.path_params["name"])
            with self._lock:
                found = self._pods.get(key)
                if found is None:
                    return _status(404, "NotFound", f'pods "{key[1]}" not found')
                if request.method == "DELETE":
                    del self._pods[key]
                    self._record("DELETED", found)
                return JSONResponse(json.loads(json.dumps(found)))

        async def log(request: Request) -> Response:
            if (denied := await guard(request)) is not None:
                return denied
            key = (request.path_params["namespace"], request.path_params["name"])
            with self._lock:
                if key not in self._pods:
                    return _status(404, "NotFound", f'pods "{key[1]}" not found')
            follow = request.query_params.get("follow") in ("true", "1")
            return StreamingResponse(self._log(key, follow), media_type="text/plain")

        ns = "/api/v1/namespaces/{namespace}/pods"
        return Starlette(
            routes=[
                Route("/api/v1/nodes", nodes),
                Route(ns, pods, methods=["GET", "POST"]),
                Route(ns + "/{name}", pod, methods=["GET", "DELETE"]),
                Route(ns + "/{name}/log", log),
            ]
        )

    async def _create(self, request: Request, namespace: str) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _status(400, "BadRequest", "the body is not JSON")
        if not isinstance(body, dict) or body.get("kind", "Pod") != "Pod":
            return _status(400, "BadRequest", "not a Pod")
        metadata = body.setdefault("metadata", {})
        name = metadata.get("name") or (metadata.get("generateName", "pod-") + uuid.uuid4().hex[:5])
        containers = (body.get("spec") or {}).get("containers")
        if not isinstance(containers, list) or not containers or "image" not in containers[0]:
            return _status(
                422, "Invalid", f'Pod "{name}" is invalid: spec.containers: Required value'
            )
        with self._lock:
            if (namespace, name) in self._pods:
                return _status(409, "AlreadyExists", f'pods "{name}" already exists')
            metadata.update(
                name=name, namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=timestamp()
            )
            body.update(kind="Pod", apiVersion="v1", status={"phase": "Pending"})
            self._pods[(namespace, name)] = body
            self._record("ADDED", body)
            return JSONResponse(json.loads(json.dumps(body)), status_code=201)

    async def _watch(
        self, request: Request, namespace: str, selector: str | None
    ) -> AsyncIterator[bytes]:
        since_text = request.query_params.get("resourceVersion")
        timeout = request.query_params.get("timeoutSeconds")
        deadline = time.monotonic() + float(timeout) if timeout else None
        with self._lock:
            if not since_text or since_text == "0":
                backlog = [
                    ("ADDED", json.loads(json.dumps(p)))
                    for (ns, _), p in self._pods.items()
                    if ns == namespace
                ]
                since = self._version
            else:
                since, backlog = int(since_text), []
        for kind, obj in backlog:
            if _selected(obj["metadata"].get("labels", {}), selector):
                yield (json.dumps({"type": kind, "object": obj}) + "\n").encode()
        while True:
            with self._lock:
                if self._stopping:
                    return
                changed = self._changed
                fresh = [(v, k, o) for v, k, o in self._events if v > since]
            for version, kind, obj in fresh:
                since = version
                if obj["metadata"].get("namespace") == namespace and _selected(
                    obj["metadata"].get("labels", {}), selector
                ):
                    yield (json.dumps({"type": kind, "object": obj}) + "\n").encode()
            if fresh:
                continue
            assert changed is not None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                await asyncio.wait_for(changed.wait(), left)
            except TimeoutError:
                return

    async def _log(self, key: tuple[str, str], follow: bool) -> AsyncIterator[bytes]:
        sent = 0
        while True:
            with self._lock:
                lines = list(self._logs.get(key, []))
                pod = self._pods.get(key)
                done = self._stopping or pod is None or pod["status"].get("phase") in TERMINAL
                changed = self._changed
            for text in lines[sent:]:
                yield text.encode()
            sent = len(lines)
            if not follow or done:
                return
            assert changed is not None
            await changed.wait()


def _page(kind: str, items: list[dict[str, Any]], request: Request, version: int) -> dict[str, Any]:
    """One page of a list (`limit`, `continue` = the index of the next item)."""
    limit = int(request.query_params.get("limit") or 0)
    start = int(request.query_params.get("continue") or 0)
    end = start + limit if limit else len(items)
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    if end < len(items):
        metadata["continue"] = str(end)
    return {"kind": kind, "apiVersion": "v1", "metadata": metadata, "items": items[start:end]}


@contextmanager
def kube_api() -> Iterator[KubeApi]:
    """A started emulator, stopped at the end."""
    api = KubeApi()
    api.start()
    try:
        yield api
    finally:
        api.go_down()
