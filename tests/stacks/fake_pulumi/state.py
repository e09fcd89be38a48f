"""The fake CLI's state: argv parsing, per-stack JSON state, lock files, engine events."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

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

    def outputs(self, op: str, res: dict[str, Any], old: Any, new: Any, diffs: list[str]) -> None:
        meta = {"op": op, "urn": res["urn"], "type": res["type"], "provider": "",
                "old": old, "new": new, "diffs": diffs, "keys": [], "logical": True}  # fmt: skip
        self.emit(resOutputsEvent={"metadata": meta, "planning": True})

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


def computed(typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
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


def snapshot(res: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": res["type"],
        "urn": res["urn"],
        "id": res.get("id", ""),
        "inputs": res["inputs"],
        "outputs": res.get("outputs", {}),
    }


def record_history(state: dict[str, Any], kind: str, counts: dict[str, int]) -> None:
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


def hang_if_asked() -> None:
    fifo = os.environ.get("FAKE_PULUMI_HANG_FIFO")
    if not fifo:
        return
    with open(fifo, "w", encoding="utf-8") as pipe:
        pipe.write("started\n")
    signal.pause()
