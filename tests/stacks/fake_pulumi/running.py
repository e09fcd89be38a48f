"""The fake CLI's `preview`/`up`: a ResourceMonitor over gRPC that runs the inline program.

Imported only for those two commands: gRPC and the SDK's protos are slow to import.
"""

from __future__ import annotations

import os
import threading
import uuid
from concurrent import futures
from typing import Any

import grpc  # type: ignore[import-untyped]
from google.protobuf import empty_pb2, json_format, struct_pb2  # type: ignore[import-untyped]
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, resource_pb2, resource_pb2_grpc

from tests.stacks.fake_pulumi.state import (
    REPLACE_KEYS,
    ROOT_TYPE,
    Events,
    Fail,
    Store,
    computed,
    hang_if_asked,
    record_history,
    snapshot,
)


class Monitor(resource_pb2_grpc.ResourceMonitorServicer):
    def __init__(
        self, stack: str, project: str, state: dict[str, Any], preview: bool, events: Events
    ) -> None:
        self.stack, self.project, self.state = stack, project, state
        self.preview, self.events = preview, events
        self.seen: set[str] = set()
        self.counts: dict[str, int] = {}
        self.outputs: dict[str, Any] = {}
        self.root_urn = ""
        self.guard = threading.Lock()

    def GetDeploymentInfo(self, request: Any, context: Any) -> Any:
        return resource_pb2.DeploymentInfo(
            supportedFeatures=[resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS]
        )

    def SupportsFeature(self, request: Any, context: Any) -> Any:
        return resource_pb2.SupportsFeatureResponse(hasSupport=request.id == "secrets")

    def SignalAndWaitForShutdown(self, request: Any, context: Any) -> Any:
        return empty_pb2.Empty()

    def Invoke(self, request: Any, context: Any) -> Any:
        canned = {"aws:ec2/getAmi:getAmi": {"id": "ami-fake", "imageId": "ami-fake"}}
        ret = struct_pb2.Struct()
        ret.update(canned.get(request.tok, {}))
        return resource_pb2.ResourceInvokeResponse(**{"return": ret})

    def RegisterResourceOutputs(self, request: Any, context: Any) -> Any:
        if request.urn == self.root_urn:
            self.outputs = json_format.MessageToDict(request.outputs)
        return empty_pb2.Empty()

    def RegisterResource(self, request: Any, context: Any) -> Any:
        urn = f"urn:pulumi:{self.stack}::{self.project}::{request.type}::{request.name}"
        if request.type == ROOT_TYPE:
            self.root_urn = urn
            return resource_pb2.RegisterResourceResponse(urn=urn)
        inputs = json_format.MessageToDict(request.object)
        with self.guard:
            rid, outputs = self._step(urn, request.type, request.name, inputs)
        obj = struct_pb2.Struct()
        obj.update(outputs)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=rid, object=obj)

    def _step(self, urn: str, typ: str, name: str, inputs: dict[str, Any]) -> tuple[str, Any]:
        self.seen.add(urn)
        old = self.state["resources"].get(urn)
        res = {"urn": urn, "type": typ, "name": name, "inputs": inputs}
        diffs = (
            []
            if old is None
            else sorted(
                k for k in set(inputs) | set(old["inputs"]) if inputs.get(k) != old["inputs"].get(k)
            )
        )
        keys = [k for k in diffs if k in REPLACE_KEYS]
        op = "create" if old is None else "replace" if keys else "update" if diffs else "same"
        self.counts[op] = self.counts.get(op, 0) + 1
        self.events.step(
            op,
            res,
            None if old is None else snapshot(old),
            snapshot(res),
            diffs,
            keys,
            self.preview,
        )
        if self.preview:
            if op == "same":
                return str(old["id"]), old["outputs"]
            return ("" if old is None else str(old["id"])), inputs
        rid = str(old["id"]) if op in ("same", "update") else f"{name}-{uuid.uuid4().hex[:6]}"
        res.update(id=rid, outputs={**inputs, **computed(typ, name, inputs)})
        self.state["resources"][urn] = res
        return rid, res["outputs"]


def run_program(
    store: Store, stack: str, flags: dict[str, list[str]], events: Events, preview: bool
) -> None:
    state = store.load(stack)
    lock = None if preview else store.lock(stack)
    if not preview:
        hang_if_asked()
    events.emit(preludeEvent={"config": {}})
    monitor = Monitor(stack, store.project, state, preview, events)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(monitor, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        channel = grpc.insecure_channel(flags["--client"][0])
        response = language_pb2_grpc.LanguageRuntimeStub(channel).Run(
            language_pb2.RunRequest(
                project=store.project,
                stack=stack,
                pwd=os.getcwd(),
                program=".",
                config=state["config"],
                dryRun=preview,
                parallel=4,
                monitor_address=f"127.0.0.1:{port}",
                organization="organization",
            )
        )
    finally:
        server.stop(0)
    if response.error:
        if lock is not None:
            lock.unlink()
        events.close(monitor.counts)
        raise Fail("error: an unhandled error occurred: program failed", stdout=response.error)
    for urn in sorted(set(state["resources"]) - monitor.seen):
        old = state["resources"][urn]
        monitor.counts["delete"] = monitor.counts.get("delete", 0) + 1
        events.step("delete", old, snapshot(old), None, [], [], preview)
        if not preview:
            del state["resources"][urn]
    events.close(monitor.counts)
    if not preview:
        state["outputs"] = monitor.outputs
        record_history(state, "update", monitor.counts)
        store.save(stack, state)
        assert lock is not None
        lock.unlink()
    print(f"{'Previewed' if preview else 'Updated'} {stack}: {monitor.counts}")
