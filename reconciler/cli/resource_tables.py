"""The rows of `dockyard fleet|volume|gateway` listings, with dstack's columns (pure).

Fleets: NAME NODES GPU SPOT BACKEND PRICE STATUS CREATED — a row for what the fleet asks
for, then one per instance; `-v` shows RESOURCES instead of GPU and adds ERROR. Volumes:
NAME BACKEND STATUS CREATED (`-v`: NAME BACKEND REGION STATUS CREATED ERROR). Gateways:
NAME BACKEND HOSTNAME DOMAIN DEFAULT STATUS (`-v` adds CREATED and ERROR). Called by
`cli.resources`; text only, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from reconciler.api import models as wire
from reconciler.cli.console import ago
from reconciler.cli.describing import (
    backend_label,
    describe_resources,
    instance_resources,
    nodes_label,
    price_label,
    requested_gpu,
)

Rows = list[tuple[str, ...]]


def _range(value: Any, unit: str = "") -> str:
    if not isinstance(value, Mapping):
        return ""
    low, high = value.get("min"), value.get("max")

    def one(v: Any) -> str:
        return "" if v is None else f"{float(v):g}{unit}"

    return one(low) if low == high else f"{one(low)}..{one(high)}"


def requested_resources(resources: Any) -> str:
    """A fleet's normalized `resources` as `cpu=8.. mem=32GB..64GB disk=100GB gpu=A100:2`."""
    if not isinstance(resources, Mapping):
        return ""
    cpu = resources.get("cpu")
    parts = [
        f"cpu={_range(cpu.get('count'))}" if isinstance(cpu, Mapping) and cpu.get("count") else "",
        f"mem={_range(resources.get('memory'), 'GB')}" if resources.get("memory") else "",
    ]
    disk = resources.get("disk")
    if isinstance(disk, Mapping) and disk.get("size"):
        parts.append(f"disk={_range(disk['size'], 'GB')}")
    gpu = requested_gpu(resources)
    parts.append(f"gpu={gpu}" if gpu else "")
    return " ".join(p for p in parts if p)


def _fleet_row(fleet: wire.Fleet, verbose: bool) -> tuple[str, ...]:
    config = fleet.spec.get("configuration") or fleet.spec
    ssh = config.get("ssh_config")
    if isinstance(ssh, dict):
        nodes, asked, spot, backend, price = str(len(ssh.get("hosts") or [])), "", "", "ssh", ""
    else:
        max_price = config.get("max_price")
        nodes = nodes_label(config.get("nodes"))
        resources = config.get("resources")
        asked = requested_resources(resources) if verbose else requested_gpu(resources)
        spot = str(config.get("spot_policy") or "")
        backend = ", ".join(config.get("backends") or []) or "*"
        price = f"$0..{max_price:g}" if isinstance(max_price, int | float) else ""
    if verbose and config.get("placement") == "cluster":
        nodes += " (cluster)"
    row = (fleet.name, nodes, asked, spot, backend, price, fleet.status, ago(fleet.created_at))
    return (*row, fleet.status_message if fleet.status == "failed" else "") if verbose else row


def _instance_row(i: wire.Instance, verbose: bool) -> tuple[str, ...]:
    resources = instance_resources(i.instance_type) or i.resources
    remote = i.backend == "remote"
    spot = ""
    if not remote and isinstance(resources, dict):
        spot = "spot" if resources.get("spot") else "on-demand"
    row = (
        f"  instance={i.instance_num}",
        "",
        describe_resources(resources, gpu_only=not verbose),
        spot,
        backend_label(i.dockyard_backend, i.backend, i.region),
        "" if remote else price_label(i.price),
        i.status,
        ago(i.created),
    )
    error = str(getattr(i, "termination_reason", None) or "") if i.status == "terminated" else ""
    return (*row, error) if verbose else row


def fleet_table(fleets: Sequence[wire.Fleet], verbose: bool) -> tuple[list[str], Rows]:
    """Newest fleet first; each fleet's row, then its instances'."""
    middle = "RESOURCES" if verbose else "GPU"
    columns = ["NAME", "NODES", middle, "SPOT", "BACKEND", "PRICE", "STATUS", "CREATED"]
    rows: Rows = []
    for fleet in sorted(fleets, key=lambda f: f.created_at, reverse=True):
        rows.append(_fleet_row(fleet, verbose))
        rows += [_instance_row(i, verbose) for i in fleet.instances]
    return ([*columns, "ERROR"] if verbose else columns), rows


def _created(when: datetime | None) -> str:
    return ago(when) if when else ""


def _error(item: wire.Volume) -> str:
    return item.status_message if item.status == "failed" else ""


def volume_table(volumes: Sequence[wire.Volume], verbose: bool) -> tuple[list[str], Rows]:
    rows: Rows
    if not verbose:
        rows = [
            (v.name, _backend(v.configuration), v.status, _created(v.created_at)) for v in volumes
        ]
        return ["NAME", "BACKEND", "STATUS", "CREATED"], rows
    rows = [
        (
            v.name,
            str(v.configuration.get("backend") or "-"),
            str(v.configuration.get("region") or ""),
            v.status,
            _created(v.created_at),
            _error(v),
        )
        for v in volumes
    ]
    return ["NAME", "BACKEND", "REGION", "STATUS", "CREATED", "ERROR"], rows


def gateway_table(gateways: Sequence[wire.Volume], verbose: bool) -> tuple[list[str], Rows]:
    columns = ["NAME", "BACKEND", "HOSTNAME", "DOMAIN", "DEFAULT", "STATUS"]
    rows: Rows = []
    for g in gateways:
        row = (
            g.name,
            _backend(g.configuration),
            str((g.outputs or {}).get("hostname") or ""),
            str(g.configuration.get("domain") or ""),
            "✓" if g.configuration.get("default") else "",
            g.status,
        )
        rows.append((*row, _created(g.created_at), _error(g)) if verbose else row)
    return ([*columns, "CREATED", "ERROR"] if verbose else columns), rows


def _backend(configuration: Mapping[str, Any]) -> str:
    backend = str(configuration.get("backend") or "-")
    region = configuration.get("region")
    return f"{backend} ({region})" if region else backend
