"""The state of the Kubernetes API emulator (tests/services/kubeapi.py): nodes, pods, their
watch events and logs, and what a test does to them (the kubelet's and an operator's part).

`KubeState` holds the objects as the API server would return them (JSON dicts, each
change a new `resourceVersion` and one watch event) and wakes the emulator's open watches
and log streams on every change; `KubeApi` serves it over HTTP. Its methods are called from
the test's thread, the serving loop's handlers from the emulator's thread: every access
holds `_lock`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

TOKEN = "emulator-token"
TERMINAL = ("Succeeded", "Failed")


class KubeState:
    """Nodes, pods, events and logs; see the module docstring."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.nodes: list[dict[str, Any]] = []
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._logs: dict[tuple[str, str], list[str]] = {}
        self._events: list[tuple[int, str, dict[str, Any]]] = []
        self._version = 100
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._stopping = False
        self.port = 0
        self.requests: list[str] = []  # "METHOD path?query" of every request, in order

    def add_node(
        self,
        name: str,
        *,
        cpu: str = "8",
        memory: str = "32Gi",
        gpus: int = 0,
        product: str | None = None,
        gpu_memory_mib: int | None = None,
        ready: bool = True,
        unschedulable: bool = False,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
            all_labels["nvidia.com/gpu.count"] = str(gpus)
        if product:
            all_labels["nvidia.com/gpu.product"] = product
        if gpu_memory_mib:
            all_labels["nvidia.com/gpu.memory"] = str(gpu_memory_mib)
        with self._lock:
            self.nodes.append(
                {
                    "kind": "Node",
                    "apiVersion": "v1",
                    "metadata": {
                        "name": name,
                        "uid": str(uuid.uuid4()),
                        "labels": all_labels,
                        "resourceVersion": str(self._next()),
                    },
                    "spec": {"unschedulable": True} if unschedulable else {},
                    "status": {
                        "capacity": dict(allocatable),
                        "allocatable": allocatable,
                        "conditions": [{"type": "Ready", "status": str(ready)}],
                    },
                }
            )

    def pods(self, namespace: str = "default") -> dict[str, dict[str, Any]]:
        """A copy of the namespace's pods by name."""
        with self._lock:
            return {
                n: json.loads(json.dumps(p)) for (ns, n), p in self._pods.items() if ns == namespace
            }

    def set_phase(
        self,
        name: str,
        phase: str,
        *,
        namespace: str = "default",
        node: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        exit_code: int = 1,
        pod_ip: str | None = None,
    ) -> None:
        """Move a pod to `phase` as the kubelet reports it (see the module docstring)."""
        with self._lock:
            pod = self._pods[(namespace, name)]
            status: dict[str, Any] = {"phase": phase}
            container = pod["spec"]["containers"][0]["name"]
            if phase == "Running":
                status["podIP"] = pod_ip or "10.0.0." + str(1 + len(self._pods) % 250)
                status["conditions"] = [{"type": "Ready", "status": "True"}]
                status["containerStatuses"] = [
                    {
                        "name": container,
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": timestamp()}},
                    }
                ]
            elif phase in TERMINAL:
                code = 0 if phase == "Succeeded" else exit_code
                state = {
                    "exitCode": code,
                    "reason": reason or ("Completed" if code == 0 else "Error"),
                }
                status["containerStatuses"] = [
                    {
                        "name": container,
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": state},
                    }
                ]
            if reason:
                status["reason"] = reason
            if message:
                status["message"] = message
            if node or phase == "Running":
                pod["spec"]["nodeName"] = node or pod["spec"].get("nodeName") or "node-1"
                status["hostIP"] = "192.168.0.1"
            pod["status"] = status
            self._record("MODIFIED", pod)

    def remove_pod(self, name: str, namespace: str = "default") -> None:
        """Delete a pod behind the client's back (an operator's `kubectl delete`, an eviction)."""
        with self._lock:
            pod = self._pods.pop((namespace, name))
            self._record("DELETED", pod)

    def append_log(self, name: str, text: str, namespace: str = "default") -> None:
        with self._lock:
            self._logs.setdefault((namespace, name), []).append(text)
            self._wake()

    # -- internals ------------------------------------------------------------------------

    def _next(self) -> int:
        self._version += 1
        return self._version

    def _wake(self) -> None:
        """(lock held) Wakes every waiting watch and log stream."""
        loop, changed = self._loop, self._changed
        if loop is not None and changed is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._rearm, changed)

    def _rearm(self, changed: asyncio.Event) -> None:
        self._changed = asyncio.Event()
        changed.set()

    def _record(self, kind: str, pod: dict[str, Any]) -> None:
        """(lock held) A change of `pod`: new resourceVersion, one watch event."""
        version = self._next()
        pod["metadata"]["resourceVersion"] = str(version)
        self._events.append((version, kind, json.loads(json.dumps(pod))))
        self._wake()


def timestamp() -> str:
    """Now, as the API server writes times."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
