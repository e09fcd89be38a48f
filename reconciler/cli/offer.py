"""`dockyard offer [--project P] [--gpu|--cpu|--memory|--disk SPEC] [--fleet F] [-b B] [-r R]
[--json] [--group-by …] [--catalog]`.

Like dstack's `offer`, the offers are the project's (`--project`, else the default one):
the instances of its fleets a run with these requirements could use (the server's answer
to a plan of such a run, idle first), then — only when the project has cloud fleets —
the offers of the built-in catalog (`stacks.catalog`, its source in
`stacks/catalog/SOURCE.md`) on those fleets' backends, cheapest first. A project with only
local or SSH capacity therefore lists no cloud offers. The offers of the project's Slurm
clusters (the server's backends file, read from the clusters now: `reconciler.cli.backend.
cluster_offers`) come with the instances. `--catalog` lists the whole catalog
without a server. The columns are dstack's: #, BACKEND, RESOURCES, INSTANCE TYPE, PRICE.
As in dstack, `--cpu`, `--memory` and `--disk` take its ranges (`8..`, `32GB..64GB`), and
`--fleet` (repeatable) keeps the offers of those fleets: their instances, and catalog offers
only on their cloud backends.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from reconciler.api import Client
from reconciler.cli.backend import cluster_offers
from reconciler.cli.console import JsonOption, ProjectOption, open_client, out, print_json, table
from reconciler.cli.planview import show_offers
from reconciler.errors import UsageError
from stacks.catalog import GROUP_KEYS, group_offers
from stacks.catalog.listing import offers_for_spec
from stacks.offer import Offer

SPOT_POLICIES = ("spot", "on-demand", "auto")
CATALOG_BACKENDS = ("aws", "gcp")


def _price(value: float) -> str:
    return f"${value:.4f}".rstrip("0").rstrip(".")


def _group_keys(value: str) -> list[str]:
    keys = [k.strip() for k in value.split(",") if k.strip()]
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown or not keys:
        raise UsageError(f"--group-by takes a list of {', '.join(GROUP_KEYS)}")
    return keys


def cloud_backends(fleet_specs: list[dict[str, Any]]) -> list[str]:
    """The catalog backends the project's cloud fleets may use (none for local/SSH only)."""
    found: list[str] = []
    for spec in fleet_specs:
        config = spec.get("configuration") or spec
        if config.get("ssh_config") is not None:
            continue
        for backend in config.get("backends") or []:
            if backend in CATALOG_BACKENDS and backend not in found:
                found.append(backend)
    return found


RESOURCE_FILTERS = ("gpu", "cpu", "memory", "disk")


def resources_of(filters: dict[str, Any]) -> dict[str, str]:
    """Pure: the `resources:` the filters ask for (`--gpu/--cpu/--memory/--disk`)."""
    return {key: str(filters[key]) for key in RESOURCE_FILTERS if filters.get(key)}


def probe_config(
    gpu: str | None,
    spot_policy: str,
    max_price: float | None,
    regions: list[str],
    *,
    resources: dict[str, str] | None = None,
    fleets: list[str] | None = None,
) -> str:
    """The YAML of a run with the requirements asked for (planned, never submitted)."""
    lines = ["type: task", "name: offer-probe", "commands: [':']", f"spot_policy: {spot_policy}"]
    wanted = {**({"gpu": gpu} if gpu else {}), **(resources or {})}
    if wanted:
        lines.append(f"resources: {json.dumps(wanted)}")
    if fleets:
        lines.append(f"fleets: {json.dumps(fleets)}")
    if max_price is not None:
        lines.append(f"max_price: {max_price}")
    if regions:
        lines.append(f"regions: {json.dumps(regions)}")
    return "\n".join(lines) + "\n"


def catalog_offers(filters: dict[str, Any], backends: list[str]) -> tuple[Offer, ...]:
    """The catalog offers matching the filters (resources too) on `backends` (all: [])."""
    spec: dict[str, Any] = {"spot_policy": filters["spot_policy"]}
    if resources := resources_of(filters):
        spec["resources"] = resources
    if backends:
        spec["backends"] = backends
    if filters["regions"]:
        spec["regions"] = filters["regions"]
    if filters["max_price"] is not None:
        spec["max_price"] = filters["max_price"]
    return offers_for_spec(spec)


def _project_offers(
    client: Client, filters: dict[str, Any], backends: list[str], fleets: list[str]
) -> tuple[list[dict[str, Any]], tuple[Offer, ...]]:
    """The project's instance offers and the catalog offers of its cloud backends."""
    chosen = [f for f in client.list_fleets() if not fleets or f.name in fleets]
    clouds = cloud_backends([fleet.spec for fleet in chosen])
    wanted = [b for b in clouds if not backends or b in backends]
    config = probe_config(
        filters["gpu"],
        filters["spot_policy"],
        filters["max_price"],
        filters["regions"],
        resources=resources_of(filters),
        fleets=fleets,
    )
    plan = client.get_plan(config, path="offer.dstack.yml")
    local = [
        o
        for o in plan.get("offers") or []
        if (not backends or o.get("backend") in backends)
        and (not fleets or o.get("fleet") in fleets)
    ]
    local += cluster_offers(client, filters, backends, fleets)  # the project's Slurm clusters
    catalog = catalog_offers(filters, wanted) if wanted else ()
    return local, catalog


def _show_groups(offers: tuple[Offer, ...], group_by: str, as_json: bool) -> None:
    groups = group_offers(offers, _group_keys(group_by))
    if as_json:
        print_json([g.to_json() for g in groups])
        return
    keys = [k for k, _ in groups[0].key] if groups else _group_keys(group_by)
    rows = [
        (*(v for _, v in g.key), g.offers, f"{_price(g.min_price)}..{_price(g.max_price)}")
        for g in groups
    ]
    table([*(k.upper() for k in keys), "OFFERS", "PRICE"], rows)


def _list(
    filters: dict[str, Any],
    backends: list[str],
    use_catalog: bool,
    project: str | None,
    fleets: list[str],
) -> tuple[list[dict[str, Any]], tuple[Offer, ...]]:
    if use_catalog:
        if fleets:
            raise UsageError("--fleet needs the project's fleets: drop --catalog")
        return [], catalog_offers(filters, backends)
    try:
        client = open_client(project)
    except UsageError as exc:
        raise UsageError(f"{exc} (or list the built-in catalog with --catalog)") from None
    with client:
        return _project_offers(client, filters, backends, fleets)


def register(app: typer.Typer) -> None:
    @app.command("offer")
    def offer(
        gpu: Annotated[
            str | None, typer.Option("--gpu", help="GPU spec: A100, 24GB.., H100:8, A100:40GB:2.")
        ] = None,
        backend: Annotated[
            list[str] | None, typer.Option("--backend", "-b", help="Backend (repeatable).")
        ] = None,
        region: Annotated[
            list[str] | None, typer.Option("--region", "-r", help="Region (repeatable).")
        ] = None,
        spot_policy: Annotated[
            str, typer.Option("--spot-policy", help="spot, on-demand or auto.")
        ] = "auto",
        max_price: Annotated[float | None, typer.Option("--max-price", help="Maximum $/h.")] = None,
        cpu: Annotated[str | None, typer.Option("--cpu", help="CPUs: 8, 4.., 4..16.")] = None,
        memory: Annotated[
            str | None, typer.Option("--memory", help="Memory: 32GB, 16GB.., 16GB..64GB.")
        ] = None,
        disk: Annotated[str | None, typer.Option("--disk", help="Disk: 100GB, 200GB..")] = None,
        fleet: Annotated[
            list[str] | None, typer.Option("--fleet", help="Only this fleet's (repeatable).")
        ] = None,
        group_by: Annotated[
            str | None,
            typer.Option(
                "--group-by", help="Aggregate catalog offers by gpu,backend,region,count."
            ),
        ] = None,
        max_offers: Annotated[int, typer.Option("--max-offers", help="Rows shown.")] = 50,
        catalog: Annotated[
            bool, typer.Option("--catalog", help="The whole built-in catalog (no server).")
        ] = False,
        as_json: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """List GPU offers: the project's instances that fit, then its clouds' catalog offers."""
        if spot_policy not in SPOT_POLICIES:
            raise UsageError(f"--spot-policy must be one of {', '.join(SPOT_POLICIES)}")
        filters = {
            "gpu": gpu,
            "regions": region or [],
            "spot_policy": spot_policy,
            "max_price": max_price,
            "cpu": cpu,
            "memory": memory,
            "disk": disk,
        }
        try:
            local, from_catalog = _list(filters, backend or [], catalog, project, fleet or [])
        except ValueError as exc:
            asked = " ".join(f"--{k} {v}" for k, v in resources_of(filters).items())
            raise UsageError(f"{asked}: {exc}") from exc
        if group_by:
            _show_groups(from_catalog, group_by, as_json)
            return
        offers = [*local, *(o.to_json() for o in from_catalog)]
        if as_json:
            print_json(offers[:max_offers])
            return
        show_offers(offers[:max_offers], total=len(offers))
        if not offers and not catalog:
            out().print("(the project's fleets have no matching instances and no cloud backends)")
