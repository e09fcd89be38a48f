"""`dockyard event [list] [--since T] [filters] [-w] [-n N] [--json]`: state changes.

Every state change is an event row (target, message); the last 100 by default. The
filters are dstack's: `--target-fleet|run|volume|gateway|secret NAME` (repeatable; one
kind at a time) keeps events that target those; `--within-fleet|run|gateway NAME` also
keeps events of what lives inside them (instances `<fleet>-N`, jobs `<run>-…`, replicas);
`--include-target-type TYPE` (repeatable) keeps events with a target of that type.
`-w` keeps printing new events every 2 s until Ctrl-C. Filtering of the fetched events is
`select_events` (pure); one kind of `--target-*` with one name is also sent to the server.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from reconciler.api import models as wire
from reconciler.cli.console import JsonOption, ProjectOption, open_client, print_json, table
from reconciler.cli.logs import parse_since
from reconciler.errors import UsageError

WATCH_SECONDS = 2.0
TARGET_KINDS = ("fleet", "run", "volume", "gateway", "secret")
WITHIN_KINDS = ("fleet", "run", "gateway")


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What `--target-*`, `--within-*` and `--include-target-type` asked for."""

    target_type: str | None = None
    target_names: tuple[str, ...] = ()
    within_type: str | None = None
    within_names: tuple[str, ...] = ()
    types: tuple[str, ...] = ()

    def keeps(self, event: wire.Event) -> bool:
        targets = event.targets
        if self.target_type and not any(
            t.type == self.target_type and t.name in self.target_names for t in targets
        ):
            return False
        if self.within_type and not any(self._inside(t) for t in targets):
            return False
        return not self.types or any(t.type in self.types for t in targets)

    def _inside(self, target: wire.EventTarget) -> bool:
        if target.type == self.within_type and target.name in self.within_names:
            return True
        return target.type != self.within_type and any(
            target.name.startswith(f"{name}-") for name in self.within_names
        )


def select_events(events: Sequence[wire.Event], wanted: EventFilter) -> list[wire.Event]:
    return [event for event in events if wanted.keeps(event)]


def _one_kind(option: str, chosen: dict[str, list[str]]) -> tuple[str | None, tuple[str, ...]]:
    given = {kind: names for kind, names in chosen.items() if names}
    if len(given) > 1:
        raise UsageError(f"use one kind of {option}-* at a time")
    kind, names = next(iter(given.items()), (None, []))
    return kind, tuple(names)


def _show(events: list[wire.Event], as_json: bool) -> None:
    if as_json:
        print_json(events)
        return
    rows = [
        (
            e.timestamp.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
            ", ".join(f"{t.type} {t.name}" for t in e.targets),
            e.message,
        )
        for e in events
    ]
    table(["TIME", "TARGET", "MESSAGE"], rows)


def _watch(fetch: Callable[[], list[wire.Event]], as_json: bool) -> None:
    seen: set[str] = set()
    try:
        while True:
            fresh = [e for e in fetch() if e.id not in seen]
            seen.update(e.id for e in fresh)
            if fresh:
                _show(fresh, as_json)
            time.sleep(WATCH_SECONDS)
    except KeyboardInterrupt:
        return


def _run(
    limit: int,
    since: str | None,
    wanted: EventFilter,
    watch: bool,
    as_json: bool,
    project: str | None,
) -> None:
    cutoff = parse_since(since, datetime.now(UTC)) if since else None
    one = len(wanted.target_names) == 1
    with open_client(project) as client:

        def fetch() -> list[wire.Event]:
            events = client.list_events(
                limit=limit,
                since=cutoff,
                target_type=wanted.target_type if one else None,
                target_name=wanted.target_names[0] if one else None,
            )
            return select_events(events, wanted)

        if watch:
            _watch(fetch, as_json)
            return
        _show(fetch(), as_json)


Names = list[str] | None
LastOption = Annotated[int, typer.Option("-n", "--last", help="How many events to fetch.")]
SinceOption = Annotated[
    str | None, typer.Option("--since", help="A duration (10m, 1d) or an RFC 3339 time.")
]
WatchOption = Annotated[bool, typer.Option("-w", "--watch", help="Keep printing new events.")]
TypesOption = Annotated[
    list[str] | None,
    typer.Option("--include-target-type", help="Only events with a target of this type."),
]


def _filter(
    targets: dict[str, list[str] | None],
    within: dict[str, list[str] | None],
    types: list[str] | None,
) -> EventFilter:
    target_type, target_names = _one_kind("--target", {k: v or [] for k, v in targets.items()})
    within_type, within_names = _one_kind("--within", {k: v or [] for k, v in within.items()})
    return EventFilter(target_type, target_names, within_type, within_names, tuple(types or ()))


def list_events(
    limit: LastOption = 100,
    since: SinceOption = None,
    target_fleet: Annotated[
        Names,
        typer.Option("--target-fleet", help="Only events that target this fleet (repeatable)."),
    ] = None,
    target_run: Annotated[
        Names, typer.Option("--target-run", help="Only events that target this run (repeatable).")
    ] = None,
    target_volume: Annotated[
        Names,
        typer.Option("--target-volume", help="Only events that target this volume (repeatable)."),
    ] = None,
    target_gateway: Annotated[
        Names,
        typer.Option("--target-gateway", help="Only events that target this gateway (repeatable)."),
    ] = None,
    target_secret: Annotated[
        Names,
        typer.Option("--target-secret", help="Only events that target this secret (repeatable)."),
    ] = None,
    within_fleet: Annotated[
        Names,
        typer.Option(
            "--within-fleet", help="Only events of this fleet and what it holds (repeatable)."
        ),
    ] = None,
    within_run: Annotated[
        Names,
        typer.Option(
            "--within-run", help="Only events of this run and what it holds (repeatable)."
        ),
    ] = None,
    within_gateway: Annotated[
        Names,
        typer.Option(
            "--within-gateway", help="Only events of this gateway and what it holds (repeatable)."
        ),
    ] = None,
    include_target_type: TypesOption = None,
    watch: WatchOption = False,
    json_: JsonOption = False,
    project: ProjectOption = None,
) -> None:
    """List the project's events, oldest first."""
    targets = {
        "fleet": target_fleet,
        "run": target_run,
        "volume": target_volume,
        "gateway": target_gateway,
        "secret": target_secret,
    }
    within = {"fleet": within_fleet, "run": within_run, "gateway": within_gateway}
    wanted = _filter(targets, within, include_target_type)
    _run(limit, since, wanted, watch, json_, project)


def _with_context(func: Callable[..., None], like: Callable[..., None]) -> Callable[..., None]:
    """`func(ctx, **params)` given the options of `like` (`dockyard event --target-run x`
    and `dockyard event list --target-run x` take the same filters)."""
    options = list(inspect.signature(like, eval_str=True).parameters.values())
    ctx = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    func.__signature__ = inspect.Signature([ctx, *options])  # type: ignore[attr-defined]
    func.__annotations__ = {p.name: p.annotation for p in [ctx, *options]}
    return func


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="List events.", invoke_without_command=True)

    def default(ctx: typer.Context, **params: Any) -> None:
        if ctx.invoked_subcommand is None:
            list_events(**params)

    group.callback()(_with_context(default, list_events))
    group.command("list")(list_events)
    app.add_typer(group, name="event")
