"""`dockyard offer [--gpu SPEC] [--json] [--group-by gpu,backend,region,count]`.

Lists the GPU offers of the built-in catalog (`stacks.catalog`, its source and date in
`stacks/catalog/SOURCE.md`), cheapest first, like dstack's `offer`. Thin: the search is
`stacks.catalog.list_offers` (pure); this module parses flags and prints a table or JSON.
"""

from __future__ import annotations

from typing import Annotated

import typer

from reconciler.cli.console import JsonOption, out, print_json, table
from reconciler.errors import UsageError
from stacks.catalog import GROUP_KEYS, describe_resources, group_offers, list_offers
from stacks.offer import Offer

SPOT_POLICIES = ("spot", "on-demand", "auto")


def _price(value: float) -> str:
    return f"${value:.4f}".rstrip("0").rstrip(".")


def _show_offers(offers: tuple[Offer, ...], limit: int) -> None:
    rows = [
        (
            index,
            offer.backend,
            offer.region,
            offer.instance_type,
            describe_resources(offer),
            "yes" if offer.spot else "no",
            _price(offer.price),
        )
        for index, offer in enumerate(offers[:limit], start=1)
    ]
    table(["#", "BACKEND", "REGION", "INSTANCE TYPE", "RESOURCES", "SPOT", "PRICE"], rows)
    if len(offers) > limit:
        out().print(f"Shown {limit} of {len(offers)} offers, ${offers[-1].price:g} max")


def _group_keys(value: str) -> list[str]:
    keys = [k.strip() for k in value.split(",") if k.strip()]
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown or not keys:
        raise UsageError(f"--group-by takes a list of {', '.join(GROUP_KEYS)}")
    return keys


def register(app: typer.Typer) -> None:
    @app.command("offer")
    def offer(
        gpu: Annotated[
            str | None, typer.Option("--gpu", help="GPU spec: A100, 24GB.., H100:8, A100:40GB:2.")
        ] = None,
        backend: Annotated[
            list[str] | None, typer.Option("--backend", "-b", help="aws or gcp (repeatable).")
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
            typer.Option("--group-by", help="Aggregate by gpu,backend,region,count."),
        ] = None,
        max_offers: Annotated[int, typer.Option("--max-offers", help="Rows shown.")] = 50,
        as_json: JsonOption = False,
    ) -> None:
        """List GPU offers from the catalog, cheapest first."""
        if spot_policy not in SPOT_POLICIES:
            raise UsageError(f"--spot-policy must be one of {', '.join(SPOT_POLICIES)}")
        try:
            offers = list_offers(
                gpu=gpu,
                backends=backend or (),
                regions=region or (),
                spot_policy=spot_policy,
                max_price=max_price,
            )
        except ValueError as exc:
            raise UsageError(f"--gpu {gpu}: {exc}") from exc
        if group_by:
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
            return
        if as_json:
            print_json([o.to_json() for o in offers[:max_offers]])
            return
        _show_offers(offers, max_offers)
