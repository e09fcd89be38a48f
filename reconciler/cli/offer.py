"""`dockyard offer [--project P] [--gpu SPEC] [-b B] [-r R] [--json] [--group-by …] [--catalog]`.

Like dstack's `offer`, the offers are the project's (`--project`, else the default one):
the instances of its fleets a run with these requirements could use (the server's answer
to a plan of such a run, idle first), then — only when the project has cloud fleets —
the offers of the built-in catalog (`stacks.catalog`, its source in
`stacks/catalog/SOURCE.md`) on those fleets' backends, cheapest first. A project with only
local or SSH capacity therefore lists no cloud offers. `--catalog` lists the whole catalog
without a server. The columns are dstack's: #, BACKEND, RESOURCES, INSTANCE TYPE, PRICE.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from reconciler.api import Client
from reconciler.cli.console import JsonOption, ProjectOption, open_client, out, print_json, table
from reconciler.cli.planview import show_offers
from reconciler.errors import UsageError
from stacks.catalog import GROUP_KEYS, group_offers, list_offers
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


def probe_config(
    gpu: str | None, spot_policy: str, max_price: float | None, regions: list[str]
) -> str:
    """The YAML of a run with the requirements asked for (planned, never submitted)."""
    lines = ["type: task", "name: offer-probe", "commands: [':']", f"spot_policy: {spot_policy}"]
    if gpu:
        lines.append(f"resources: {{gpu: {json.dumps(gpu)}}}")
    if max_price is not None:
        lines.append(f"max_price: {max_price}")
    if regions:
        lines.append(f"regions: {json.dumps(regions)}")
    return "\n".join(lines) + "\n"


def _project_offers(
    client: Client, filters: dict[str, Any], backends: list[str]
) -> tuple[list[dict[str, Any]], tuple[Offer, ...]]:
    """The project's instance offers and the catalog offers of its cloud backends."""
    clouds = cloud_backends([fleet.spec for fleet in client.list_fleets()])
    wanted = [b for b in clouds if not backends or b in backends]
    config = probe_config(
        filters["gpu"], filters["spot_policy"], filters["max_price"], filters["regions"]
    )
    plan = client.get_plan(config, path="offer.dstack.yml")
    local = [o for o in plan.get("offers") or [] if not backends or o.get("backend") in backends]
    catalog = list_offers(**filters, backends=wanted) if wanted else ()
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
    filters: dict[str, Any], backends: list[str], use_catalog: bool, project: str | None
) -> tuple[list[dict[str, Any]], tuple[Offer, ...]]:
    if use_catalog:
        return [], list_offers(**filters, backends=backends)
    try:
        client = open_client(project)
    except UsageError as exc:
        raise UsageError(f"{exc} (or list the built-in catalog with --catalog)") from None
    with client:
        return _project_offers(client, filters, backends)


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
        }
        try:
            local, catalog_offers = _list(filters, backend or [], catalog, project)
        except ValueError as exc:
            raise UsageError(f"--gpu {gpu}: {exc}") from exc
        if group_by:
            _show_groups(catalog_offers, group_by, as_json)
            return
        offers = [*local, *(o.to_json() for o in catalog_offers)]
        if as_json:
            print_json(offers[:max_offers])
            return
        show_offers(offers[:max_offers], total=len(offers))
        if not offers and not catalog:
            out().print("(the project's fleets have no matching instances and no cloud backends)")
