"""`dockyard backend list [--json]`: the clusters the server has for the project; and the
Slurm and Kubernetes clusters' offers `dockyard offer` lists (`cluster_offers`).

Shows the project's entries of the server's backends file (`POST …/backends/list`,
`reconciler.web.routes_backends`): one row per Slurm cluster (login node, GPU and CPU
partitions, price) and per Kubernetes entry. Credentials are never shown, only where
they are ("file PATH" or "inline").
"""

from __future__ import annotations

from typing import Any

import typer

from reconciler.api import Client
from reconciler.cli.console import (
    JsonOption,
    ProjectOption,
    err,
    open_client,
    out,
    print_json,
    table,
)

RESOURCE_FILTERS = ("gpu", "cpu", "memory", "disk")


def cluster_offers(
    client: Client, filters: dict[str, Any], backends: list[str], fleets: list[str]
) -> list[dict[str, Any]]:
    """The project's Slurm and Kubernetes clusters' offers for `dockyard offer` (none with
    `--fleet`: a cluster is not a fleet yet); a cluster that cannot be read is a warning on
    stderr."""
    kinds = [b for b in ("slurm", "kubernetes") if not backends or b in backends]
    if fleets or not kinds:
        return []
    body = {
        "backends": kinds,
        "resources": {k: str(filters[k]) for k in RESOURCE_FILTERS if filters.get(k)},
        "spot_policy": filters["spot_policy"],
        "regions": filters["regions"],
        "max_price": filters["max_price"],
    }
    answer: dict[str, Any] = client.post("backends/offers", body)
    for line in answer["errors"]:
        err().print(f"warning: {line}", highlight=False, markup=False)
    offers: list[dict[str, Any]] = answer["offers"]
    return offers


def _rows(backends: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for backend in backends:
        if backend["type"] == "kubernetes":
            jump = backend.get("proxy_jump") or {}
            via = f" via {jump['hostname']}:{jump['port']}" if jump else ""
            rows.append(("kubernetes", "-", f"kubeconfig {backend['kubeconfig']}{via}", "-", "-"))
            continue
        for cluster in backend["clusters"]:
            login = f"{cluster['user']}@{cluster['hostname']}:{cluster['port']}"
            gpus = ", ".join(
                f"{gpu}: {','.join(parts)}" for gpu, parts in cluster["gpu_partitions"].items()
            )
            cpus = ",".join(cluster["cpu_partitions"])
            partitions = "; ".join(p for p in (gpus, f"cpu: {cpus}" if cpus else "") if p)
            rows.append(
                ("slurm", cluster["name"], login, partitions or "-", f"${cluster['price']:g}")
            )
    return rows


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Show the server's cluster backends (Slurm, Kubernetes).", no_args_is_help=True
    )

    @group.command("list")
    def list_(json_: JsonOption = False, project: ProjectOption = None) -> None:
        """The Slurm and Kubernetes backends the server has for the project."""
        with open_client(project) as client:
            answer: dict[str, Any] = client.post("backends/list")
        if json_:
            print_json(answer)
            return
        if not answer["backends"]:
            where = answer["file"] or "the server's backends file"
            out().print(f"No cluster backends for project {answer['project']} in {where}.")
            return
        table(["TYPE", "REGION", "LOGIN", "PARTITIONS", "PRICE"], _rows(answer["backends"]))
        out().print(f"From {answer['file']}.")

    app.add_typer(group, name="backend")
