"""Showing a plan of `dockyard apply` the way dstack does: the changes, then the offers.

The plan is the server's JSON (docs/plan.md: `actions[] {action, kind, name, reason,
fields[]}`) plus `offers[]` (stacks' `Offer.to_json`). The offers table has dstack's columns
(`#`, BACKEND, RESOURCES, INSTANCE TYPE, PRICE), at most 50 rows and the footer
"Shown N of M offers, $X max".
"""

from __future__ import annotations

from typing import Any

from reconciler.cli.console import out, table

MAX_OFFERS_SHOWN = 50


def _resources(offer: dict[str, Any]) -> str:
    """`cpu=.. mem=..GB [disk=..GB] [gpu=NAME:MEM:COUNT] [(spot)]` for either offer shape.

    Catalog offers (`stacks` `Offer.to_json`) carry `cpus`, `memory_gib`, `gpu {}`; instance
    offers of existing fleets carry `resources {cpus, memory_gb, disk_gb, gpus: [name]}`.
    """
    res = offer.get("resources")
    if isinstance(res, dict):
        text = f"cpu={res.get('cpus')} mem={_num(res.get('memory_gb'))}GB"
        text += f" disk={_num(res.get('disk_gb'))}GB"
        gpus = res.get("gpus") or []
        if gpus:
            text += f" gpu={gpus[0]}:{len(gpus)}"
        return text
    gpu = offer.get("gpu") or {}
    text = f"cpu={offer.get('cpus')} mem={_num(offer.get('memory_gib'))}GB"
    if gpu.get("count"):
        text += f" gpu={gpu.get('name')}:{_num(gpu.get('memory_gib'))}GB:{gpu.get('count')}"
    return text + (" (spot)" if offer.get("spot") else "")


def _num(value: Any) -> str:
    """`1152`, `80`, `15.5` (no trailing `.0`)."""
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def _backend(offer: dict[str, Any]) -> str:
    backend = str(offer.get("backend") or "-")
    where = offer.get("region") or offer.get("fleet")
    return f"{backend} ({where})" if where else backend


def show_offers(offers: list[dict[str, Any]], total: int | None = None) -> None:
    if not offers:
        out().print("No matching offers.")
        return
    shown = offers[:MAX_OFFERS_SHOWN]
    rows = [
        (
            i,
            _backend(o),
            _resources(o),
            o.get("instance_type") or o.get("instance"),
            f"${float(o.get('price') or 0):g}",
            o.get("availability", ""),
        )
        for i, o in enumerate(shown, start=1)
    ]
    table(["#", "BACKEND", "RESOURCES", "INSTANCE TYPE", "PRICE", ""], rows)
    top = max(float(o.get("price") or 0) for o in offers)
    out().print(f"Shown {len(shown)} of {total or len(offers)} offers, ${top:g} max")


def actions_of(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The actions of a plan: the server answers one action object for one configuration
    (`{action, kind, name, reason, fields, offers}`); a full plan has `actions: [...]`."""
    if isinstance(plan.get("actions"), list):
        return [a for a in plan["actions"] if isinstance(a, dict)]
    return [plan] if "action" in plan else []


def action_of(plan: dict[str, Any]) -> tuple[str, str, str]:
    """(action, kind, name) of the first action of a one-configuration plan."""
    actions = actions_of(plan)
    first = actions[0] if actions else {}
    return (
        str(first.get("action", "create")),
        str(first.get("kind", "task")),
        str(first.get("name") or ""),
    )


def show_plan(plan: dict[str, Any], project: str, user: str) -> None:
    action, kind, name = action_of(plan)
    rows: list[tuple[str, str]] = [
        ("Project", project),
        ("User", user),
        ("Configuration", str(plan.get("path") or "")),
        ("Origin", str(plan.get("origin") or "")),
        ("Type", kind),
        ("Name", name),
        ("Action", action),
    ]
    table(["", ""], [r for r in rows if r[1]])
    for item in actions_of(plan):
        if item.get("reason"):
            out().print(f"  {item.get('kind')} {item.get('name')}: {item.get('reason')}")
        for change in item.get("fields") or []:
            out().print(f"    {change.get('field')}: {change.get('old')!r} → {change.get('new')!r}")
    offers = plan.get("offers")
    if isinstance(offers, list):
        out().print()
        show_offers(offers, plan.get("total_offers"))


def question(plan: dict[str, Any]) -> str:
    """dstack's prompts: submit / update in place / stop and override / create / re-create."""
    action, kind, name = action_of(plan)
    is_run = kind in ("task", "service", "dev-environment")
    if action in ("update", "update_in_place", "update-in-place"):
        return (
            f"Active run {name} already exists. Update the run?"
            if is_run
            else (f"Update the {kind} {name} in-place?")
        )
    if action in ("replace", "recreate"):
        return f"Stop and override the run {name}?" if is_run else f"Re-create the {kind} {name}?"
    return f"Submit the run {name}?" if is_run else f"Create the {kind} {name}?"


def is_noop(plan: dict[str, Any]) -> bool:
    action, _, _ = action_of(plan)
    return action in ("noop", "none", "unchanged")
