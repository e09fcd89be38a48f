"""A fake `pulumi` CLI for driver tests (pulumi-notes §4.3): not the engine, its contract.

Run as `<root>/bin/pulumi` (a shell wrapper `exec`s this file with the venv's Python).
It implements the subset of the CLI the Automation API calls: `version`, `stack
init/select/ls/rm/output/history`, `config set-all`, `preview`, `up`, `refresh`,
`destroy`, `cancel`. For `preview`/`up` it serves a `ResourceMonitor` over gRPC and calls
`LanguageRuntime.Run` at `--client`, so the real inline program runs in the caller's
process; it diffs registered inputs against a JSON state per stack, writes real engine
events to `--event-log` (the JSON-lines path of CLIs <= 3.205), keeps a DIY-style lock
file, and maps errors to the texts the SDK recognises.

Knobs (environment): FAKE_PULUMI_DRIFT (JSON {name: null | {key: value}}, applied by
refresh), FAKE_PULUMI_HANG_FIFO (up writes "started" there, then waits for SIGINT),
FAKE_PULUMI_LOG (append each argv as a JSON line).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import uuid
from concurrent import futures
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import grpc  # type: ignore[import-untyped]
from google.protobuf import empty_pb2, json_format, struct_pb2  # type: ignore[import-untyped]
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, resource_pb2, resource_pb2_grpc

VERSION = "3.200.0"
VALUE_FLAGS = {
    "--stack",
    "--client",
    "--event-log",
    "--exec-kind",
    "--page-size",
    "--page",
    "--secrets-provider",
    "--parallel",
    "--color",
    "--message",
    "--plaintext",
    "--secret",
}
REPLACE_KEYS = {"instanceType", "machineType", "availabilityZone", "zone", "ami"}
ROOT_TYPE = "pulumi:pulumi:Stack"
LOCKED = (
    "error: the stack is currently locked by 1 lock(s). Either wait for the other "
    "process(es) to end or delete the lock file with `pulumi cancel`."
)


class Fail(Exception):
    def __init__(self, message: str, *, stdout: str = "") -> None:
        super().__init__(message)
        self.stdout = stdout


def parse(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    words: list[str] = []
    flags: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            words += argv[i + 1 :]
            break
        if arg.startswith("--"):
            key, _, value = arg.partition("=")
            if not value and key in VALUE_FLAGS and i + 1 < len(argv):
                i += 1
                value = argv[i]
            flags.setdefault(key, []).append(value)
        else:
            words.append(arg)
        i += 1
    return words, flags


class Store:
    """Per-stack JSON state and lock files under the project's `file://` backend."""

    def __init__(self, cwd: Path) -> None:
        settings = (cwd / "Pulumi.yaml").read_text()
        self.project = next(
            line.split(":", 1)[1].strip()
            for line in settings.splitlines()
            if line.startswith("name:")
        )
        url = next(
            line.split("url:", 1)[1].strip() for line in settings.splitlines() if "url:" in line
        )
        self.root = Path(urlparse(url).path)
        self.dir = self.root / ".fake" / self.project

    def path(self, stack: str) -> Path:
        return self.dir / f"{stack}.json"

    def load(self, stack: str) -> dict[str, Any]:
        if not self.path(stack).exists():
            raise Fail(f"error: no stack named '{stack}' found")
        data: dict[str, Any] = json.loads(self.path(stack).read_text())
        return data

    def save(self, stack: str, state: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path(stack).write_text(json.dumps(state, indent=1))

    def lock_dir(self, stack: str) -> Path:
        return self.root / ".pulumi" / "locks" / "organization" / self.project / stack

    def lock(self, stack: str) -> Path:
        folder = self.lock_dir(stack)
        if folder.exists() and any(folder.iterdir()):
            raise Fail(LOCKED)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{uuid.uuid4()}.json"
        path.write_text(json.dumps({"pid": os.getpid()}))
        return path


class Events:
    def __init__(self, path: str | None) -> None:
        self.file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        self.seq = 0
        self.closed = False

    def emit(self, **event: Any) -> None:
        if self.file is None:
            return
        self.seq += 1
        self.file.write(
            json.dumps({"sequence": self.seq, "timestamp": int(time.time()), **event}) + "\n"
        )
        self.file.flush()

    def step(
        self,
        op: str,
        res: dict[str, Any],
        old: Any,
        new: Any,
        diffs: list[str],
        keys: list[str],
        preview: bool,
    ) -> None:
        meta = {
            "op": op,
            "urn": res["urn"],
            "type": res["type"],
            "provider": "",
            "old": old,
            "new": new,
            "diffs": diffs,
            "keys": keys,
            "logical": True,
        }
        self.emit(resourcePreEvent={"metadata": meta, "planning": preview})

    def close(self, counts: dict[str, int]) -> None:
        if self.closed:
            return
        self.closed = True
        self.emit(
            summaryEvent={
                "resourceChanges": counts,
                "durationSeconds": 0,
                "maybeCorrupt": False,
                "PolicyPacks": {},
            }
        )
        self.emit(cancelEvent={})
        if self.file is not None:
            self.file.close()


def _computed(typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    if typ == "aws:ec2/instance:Instance":
        return {
            "publicIp": f"198.51.100.{len(name)}",
            "privateIp": "10.0.0.5",
            "availabilityZone": inputs.get("availabilityZone") or "us-east-1a",
        }
    if typ == "aws:ec2/keyPair:KeyPair":
        return {"keyName": f"{name}-kp"}
    if typ == "aws:ec2/placementGroup:PlacementGroup":
        return {"name": f"{name}-pg"}
    return {}


def _snapshot(res: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": res["type"],
        "urn": res["urn"],
        "id": res.get("id", ""),
        "inputs": res["inputs"],
        "outputs": res.get("outputs", {}),
    }


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
            None if old is None else _snapshot(old),
            _snapshot(res),
            diffs,
            keys,
            self.preview,
        )
        if self.preview:
            if op == "same":
                return str(old["id"]), old["outputs"]
            return ("" if old is None else str(old["id"])), inputs
        rid = str(old["id"]) if op in ("same", "update") else f"{name}-{uuid.uuid4().hex[:6]}"
        res.update(id=rid, outputs={**inputs, **_computed(typ, name, inputs)})
        self.state["resources"][urn] = res
        return rid, res["outputs"]


def _history(state: dict[str, Any], kind: str, counts: dict[str, int]) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    state["history"].insert(
        0,
        {
            "kind": kind,
            "startTime": now,
            "endTime": now,
            "message": "",
            "environment": {},
            "config": {},
            "result": "succeeded",
            "resourceChanges": counts,
        },
    )


def _hang_if_asked() -> None:
    fifo = os.environ.get("FAKE_PULUMI_HANG_FIFO")
    if not fifo:
        return
    with open(fifo, "w", encoding="utf-8") as pipe:
        pipe.write("started\n")
    signal.pause()


def run_program(
    store: Store, stack: str, flags: dict[str, list[str]], events: Events, preview: bool
) -> None:
    state = store.load(stack)
    lock = None if preview else store.lock(stack)
    if not preview:
        _hang_if_asked()
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
        events.step("delete", old, _snapshot(old), None, [], [], preview)
        if not preview:
            del state["resources"][urn]
    events.close(monitor.counts)
    if not preview:
        state["outputs"] = monitor.outputs
        _history(state, "update", monitor.counts)
        store.save(stack, state)
        assert lock is not None
        lock.unlink()
    print(f"{'Previewed' if preview else 'Updated'} {stack}: {monitor.counts}")


def refresh(store: Store, stack: str, flags: dict[str, list[str]], events: Events) -> None:
    state = store.load(stack)
    preview = "--preview-only" in flags
    lock = None if preview else store.lock(stack)
    drift = json.loads(os.environ.get("FAKE_PULUMI_DRIFT") or "{}")
    counts: dict[str, int] = {}
    for urn, res in sorted(state["resources"].items()):
        change = drift.get(res["name"], {})
        new = (
            None if change is None else {**_snapshot(res), "outputs": {**res["outputs"], **change}}
        )
        diffs = sorted(change) if change else []
        op = "delete" if new is None else "update" if diffs else "same"
        counts[op] = counts.get(op, 0) + 1
        events.step("refresh", res, _snapshot(res), new, diffs, [], preview)
        if not preview and new is None:
            del state["resources"][urn]
    events.close(counts)
    if lock is not None:
        _history(state, "refresh", counts)
        store.save(stack, state)
        lock.unlink()


def destroy(store: Store, stack: str, events: Events) -> None:
    state = store.load(stack)
    lock = store.lock(stack)
    for res in state["resources"].values():
        events.step("delete", res, _snapshot(res), None, [], [], False)
    counts = {"delete": len(state["resources"])}
    events.close(counts)
    state["resources"], state["outputs"] = {}, {}
    _history(state, "destroy", counts)
    store.save(stack, state)
    lock.unlink()


def stack_command(store: Store, words: list[str], flags: dict[str, list[str]]) -> None:
    sub = words[1] if len(words) > 1 else "select"
    stack = (flags.get("--stack") or [words[-1]])[0]
    if sub == "init":
        if not os.environ.get("PULUMI_CONFIG_PASSPHRASE"):
            raise Fail("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE")
        if store.path(stack).exists():
            raise Fail(f"error: stack '{stack}' already exists")
        store.save(stack, {"resources": {}, "outputs": {}, "history": [], "config": {}})
    elif sub == "select":
        store.load(stack)
    elif sub == "rm":
        if store.load(stack)["resources"]:
            raise Fail(f"error: '{stack}' still has resources; removal rejected")
        store.path(stack).unlink()
    elif sub == "output":
        print(json.dumps(store.load(stack)["outputs"]))
    elif sub == "history":
        history = store.load(stack)["history"]
        print(json.dumps(history[: int((flags.get("--page-size") or ["100"])[0])]))
    elif sub == "ls":
        names = sorted(p.stem for p in store.dir.glob("*.json")) if store.dir.exists() else []
        print(json.dumps([{"name": n, "current": False} for n in names]))


def dispatch(words: list[str], flags: dict[str, list[str]], events: Events) -> None:
    if words == ["version"]:
        print(f"v{VERSION}")
        return
    if words and words[0] != "stack" and not os.environ.get("PULUMI_CONFIG_PASSPHRASE"):
        raise Fail("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE")
    store = Store(Path.cwd())
    stack = (flags.get("--stack") or [""])[0]
    if words[0] == "stack":
        stack_command(store, words, flags)
    elif words[:2] == ["config", "set-all"]:
        state = store.load(stack)
        for pair in flags.get("--plaintext", []) + flags.get("--secret", []):
            key, _, value = pair.partition("=")
            state["config"][key] = value
        store.save(stack, state)
    elif words[0] in ("preview", "up"):
        run_program(store, stack, flags, events, preview=words[0] == "preview")
    elif words[0] == "refresh":
        refresh(store, stack, flags, events)
    elif words[0] == "destroy":
        destroy(store, stack, events)
    elif words[0] == "cancel":
        folder = store.lock_dir(stack)
        for lock in folder.glob("*.json") if folder.exists() else ():
            lock.unlink()
    else:
        raise Fail(f"error: fake pulumi does not implement {' '.join(words)}")


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_PULUMI_LOG"):
        with open(os.environ["FAKE_PULUMI_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps(argv) + "\n")
    words, flags = parse([a for a in argv if a != "--non-interactive"])
    events = Events(flags["--event-log"][0] if "--event-log" in flags else None)
    try:
        dispatch(words, flags, events)
    except Fail as exc:
        if exc.stdout:
            print(exc.stdout)
        print(str(exc), file=sys.stderr)
        return 255
    except KeyboardInterrupt:
        print("error: update canceled", file=sys.stderr)
        return 2
    finally:
        events.close({})
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main(sys.argv[1:]))
