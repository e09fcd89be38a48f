"""The local engine: capacity that needs no cloud and no Pulumi (the embedded default).

- A fleet without a cloud backend is this host (one instance) or, with `ssh_config`, its
  SSH hosts (one instance per host; the agent is deployed on them by the reconciler, not
  here). `up` returns the instances as hostname/port/user entries (and `proxy_jump`, the
  host's jump host, where it has one), read from `ssh_config` by `schemas.sshhosts`.
- A volume is a directory `<data-dir>/volumes/<project>/<name>`; `up` creates it,
  `destroy` removes it, `refresh` reports it missing.
- A gateway is the built-in proxy of the server; `up` returns its domain and URL.

Like a Pulumi stack, each resource is a set of named items (`host/<name>`,
`directory/<name>`, `proxy/<name>`) recorded in a JSON state file per stack under
`<data-dir>/stacks/local/`; `preview` diffs the desired items against that state, so the
plan shows the same create/update/replace/delete steps as for a cloud resource.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.sshhosts import FleetHost, spec_fleet_hosts
from stacks.protocol import (
    Availability,
    EngineName,
    StackFailed,
    StackOutputs,
    StackPlan,
    StackResource,
    StackStep,
    StepOp,
)
from stacks.running import StackRunner

Items = dict[str, dict[str, Any]]
"""item name → {"type": str, "props": {...}}"""

_REPLACE_KEYS = {"local:directory": ("path",)}


@dataclass(frozen=True, slots=True)
class LocalSettings:
    """What the local engine needs to know about this host and the server."""

    data_dir: Path
    user: str
    hostname: str = "localhost"
    proxy_url: str = "http://127.0.0.1:8000/proxy/services"


# ---------------------------------------------------------------------------------------
# Desired items and outputs (pure).


def volume_path(settings: LocalSettings, project: str, name: str) -> Path:
    return settings.data_dir / "volumes" / project / name


def _ssh_host_items(hosts: list[FleetHost]) -> Items:
    items: Items = {}
    for host in hosts:
        props = {
            "index": host.index,
            "hostname": host.hostname,
            "port": host.port,
            "user": host.user,
            "identity_file": host.identity_file,
            "internal_ip": host.internal_ip,
            "blocks": host.blocks,
        }
        if host.proxy_jump is not None:  # absent, not null: a host without one reads as before
            props["proxy_jump"] = host.proxy_jump.as_record()
        items[f"host/{host.hostname}"] = {"type": "ssh:host", "props": props}
    return items


def desired_items(resource: StackResource, settings: LocalSettings) -> Items:
    """Pure: the items a resource should consist of."""
    spec = resource.spec
    if resource.kind == "fleet":
        hosts = spec_fleet_hosts(spec)
        if hosts is not None:
            return _ssh_host_items(hosts)
        props = {"index": 0, "hostname": settings.hostname, "port": None, "user": settings.user}
        return {f"host/{resource.name}-0": {"type": "local:host", "props": props}}
    if resource.kind == "volume":
        path = volume_path(settings, resource.project, resource.name)
        props = {"path": str(path), "size": spec.get("size")}
        return {f"directory/{resource.name}": {"type": "local:directory", "props": props}}
    url = f"{settings.proxy_url.rstrip('/')}/{resource.project}/"
    props = {"domain": spec.get("domain"), "url": url}
    return {f"proxy/{resource.name}": {"type": "local:proxy", "props": props}}


def outputs_of(resource: StackResource, items: Items) -> StackOutputs:
    """Pure: the outputs `up` returns for these items."""
    if resource.kind == "fleet":
        hosts = sorted(items.values(), key=lambda i: int(i["props"]["index"]))
        backend = "ssh" if resource.spec.get("ssh_config") is not None else "local"
        instances = [
            {
                "name": f"{resource.name}-{i['props']['index']}",
                **{k: v for k, v in i["props"].items() if k != "index"},
                "backend": backend,
            }
            for i in hosts
        ]
        return {"instances": instances}
    (item,) = items.values()
    if resource.kind == "volume":
        path = item["props"]["path"]
        return {"volume_id": path, "path": path, "backend": "local", "size": item["props"]["size"]}
    return {"domain": item["props"]["domain"], "url": item["props"]["url"], "backend": "local"}


def diff_items(stack: str, old: Items, new: Items) -> StackPlan:
    """Pure: the steps that turn `old` into `new` (deletes last, names sorted)."""
    steps = []
    for name in sorted(new):
        item = new[name]
        before = old.get(name)
        if before is None:
            steps.append(StackStep(StepOp.CREATE, name, item["type"]))
            continue
        changed = tuple(
            sorted(
                k
                for k in set(item["props"]) | set(before["props"])
                if item["props"].get(k) != before["props"].get(k)
            )
        )
        replace = tuple(k for k in changed if k in _REPLACE_KEYS.get(item["type"], ()))
        op = StepOp.REPLACE if replace else StepOp.UPDATE if changed else StepOp.SAME
        steps.append(StackStep(op, name, item["type"], changed, replace))
    for name in sorted(set(old) - set(new)):
        steps.append(StackStep(StepOp.DELETE, name, old[name]["type"]))
    summary: dict[str, int] = {}
    for step in steps:
        summary[step.op.value] = summary.get(step.op.value, 0) + 1
    return StackPlan(stack, tuple(steps), summary)


# ---------------------------------------------------------------------------------------
# The engine (shell).


class LocalEngine:
    """The `Engine` for the local fleet, SSH fleets, directory volumes, the built-in proxy."""

    name: EngineName = "local"

    def __init__(self, settings: LocalSettings, *, runner: StackRunner | None = None) -> None:
        self._settings = settings
        self._runner = runner or StackRunner(max_parallel=4, thread_name="local-stack")
        self._state_dir = settings.data_dir / "stacks" / "local"

    def available(self) -> Availability:
        return Availability(True)

    # state ------------------------------------------------------------------------------

    def _state_file(self, resource: StackResource) -> Path:
        return self._state_dir / f"{resource.stack_name}.json"

    def _load(self, resource: StackResource) -> Items:
        path = self._state_file(resource)
        if not path.exists():
            return {}
        data: Items = json.loads(path.read_text("utf-8"))["items"]
        return data

    def _save(self, resource: StackResource, items: Items, outputs: StackOutputs) -> None:
        path = self._state_file(resource)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"items": items, "outputs": outputs}, indent=2), "utf-8")
        os.replace(tmp, path)

    # operations -------------------------------------------------------------------------

    def _preview(self, resource: StackResource) -> StackPlan:
        return diff_items(
            resource.stack_name, self._load(resource), desired_items(resource, self._settings)
        )

    def _up(self, resource: StackResource) -> StackOutputs:
        old = self._load(resource)
        new = desired_items(resource, self._settings)
        try:
            for name, item in old.items():
                if item["type"] == "local:directory" and new.get(name) != item:
                    shutil.rmtree(item["props"]["path"], ignore_errors=True)
            for item in new.values():
                if item["type"] == "local:directory":
                    Path(item["props"]["path"]).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StackFailed(f"{resource.label}: cannot create the volume: {exc}") from exc
        outputs = outputs_of(resource, new)
        self._save(resource, new, outputs)
        return outputs

    def _refresh(self, resource: StackResource) -> StackPlan:
        recorded = self._load(resource)
        observed = {
            name: item
            for name, item in recorded.items()
            if item["type"] != "local:directory" or Path(item["props"]["path"]).is_dir()
        }
        return diff_items(resource.stack_name, recorded, observed)

    def _destroy(self, resource: StackResource) -> None:
        for item in self._load(resource).values():
            if item["type"] == "local:directory":
                shutil.rmtree(item["props"]["path"], ignore_errors=True)
        self._state_file(resource).unlink(missing_ok=True)

    async def preview(self, resource: StackResource) -> StackPlan:
        return await self._runner.run(resource.stack_name, lambda: self._preview(resource))

    async def up(self, resource: StackResource) -> StackOutputs:
        return await self._runner.run(resource.stack_name, lambda: self._up(resource))

    async def refresh(self, resource: StackResource) -> StackPlan:
        """Drift as Pulumi shows it: a recorded item that is gone is a `delete` step."""
        return await self._runner.run(resource.stack_name, lambda: self._refresh(resource))

    async def preview_destroy(self, resource: StackResource) -> StackPlan:
        """A `delete` step per recorded item (the directory of a volume, a fleet's hosts)."""
        return await self._runner.run(
            resource.stack_name, lambda: diff_items(resource.stack_name, self._load(resource), {})
        )

    async def destroy(self, resource: StackResource) -> None:
        await self._runner.run(resource.stack_name, lambda: self._destroy(resource))
