"""Profile fields shared by runs (and partly by fleets and presets): where and how to provision.

`backends`, `regions`, `spot_policy`, `retry`, `max_duration`, `idle_duration`, `schedule`,
`fleets`, `instances`, `tags`, `backend_options`, … with dstack's values and defaults.
Used by `runs.py`, `fleets.py` and `presets.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator

from schemas.base import EntityReference, StrictModel, to_entity_reference
from schemas.problems import excerpt
from schemas.scalars import Duration, IdleDuration, OffDuration, Tags

Backend = Literal[
    "amddevcloud", "aws", "azure", "cloudrift", "crusoe", "cudo", "datacrunch", "daytona",
    "digitalocean", "dstack", "gcp", "hotaisle", "jarvislabs", "kubernetes", "lambda", "lium",
    "remote", "nebius", "oci", "runpod", "seeweb", "tensordock", "vastai", "verda", "vultr",
    "slurm",
]  # fmt: skip
SpotPolicy = Literal["spot", "on-demand", "auto"]
RetryEvent = Literal["no-capacity", "interruption", "error"]


class ProfileRetry(StrictModel):
    """`retry: {on_events, duration}`; `on_events` unset means every event."""

    on_events: list[RetryEvent] | None = None
    """Events that trigger a retry: `no-capacity`, `interruption`, `error` (default: all)."""
    duration: Duration | None = None
    """How long to keep retrying, e.g. `1h` (default `1h`)."""

    @field_validator("duration")
    @classmethod
    def _not_negative(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("retry duration cannot be negative")
        return value

    @field_validator("on_events")
    @classmethod
    def _not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("`on_events` cannot be empty")
        return value


def _bool_or_model(value: Any) -> str:
    """A mapping is the model form; anything else is read as a boolean (`yes`, `1`, …)."""
    return "~model" if isinstance(value, dict | StrictModel) else "~bool"


Retry = Annotated[
    Annotated[bool, Tag("~bool")] | Annotated[ProfileRetry, Tag("~model")],
    Discriminator(_bool_or_model),
]


class UtilizationPolicy(StrictModel):
    """Stop a run whose GPUs stay under `min_gpu_utilization` % for `time_window`."""

    min_gpu_utilization: Annotated[int, Field(ge=0, le=100)]
    """Minimum GPU utilization in percent (0-100)."""
    time_window: Duration
    """Window over which utilization is measured (5m-1h)."""

    @field_validator("time_window")
    @classmethod
    def _window(cls, value: int) -> int:
        if value < 300:
            raise ValueError("the minimum time_window is 5m")
        if value > 3600:
            raise ValueError("the maximum time_window is 1h")
        return value


_CRON_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                      "nov", "dec")),
    ("day of week", 0, 6, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)  # fmt: skip


def check_cron(expression: str) -> None:
    """A five-field crontab expression (`minute hour day month day_of_week`), UTC."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            f"invalid cron {excerpt(expression)}: expected 5 fields, got {len(fields)}"
        )
    for text, (what, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for item in text.split(","):
            if not _cron_item_ok(item.lower(), low, high, names):
                raise ValueError(f"invalid cron {excerpt(expression)}: bad {what} {excerpt(item)}")


def _cron_item_ok(item: str, low: int, high: int, names: tuple[str, ...]) -> bool:
    base, _, step = item.partition("/")
    if step and not (step.isdigit() and int(step) > 0):
        return False
    if base == "*":
        return True
    bounds = base.split("-")
    if len(bounds) > 2 or not all(_cron_value_ok(b, low, high, names) for b in bounds):
        return False
    return len(bounds) == 1 or _cron_value(bounds[0], names) <= _cron_value(bounds[1], names)


def _cron_value_ok(value: str, low: int, high: int, names: tuple[str, ...]) -> bool:
    if value == "last" and high == 31:  # APScheduler's last day of the month
        return True
    return value in names or (value.isdigit() and low <= int(value) <= high)


def _cron_value(value: str, names: tuple[str, ...]) -> int:
    if value == "last":
        return 32
    return names.index(value) if value in names else int(value)


class Schedule(StrictModel):
    """`schedule: {cron: "0 8 * * *" | [..]}`; normalized to a list."""

    cron: list[str]
    """Cron expression(s) in UTC, e.g. `0 8 * * mon-fri`."""

    @field_validator("cron", mode="before", json_schema_input_type=str | list[str])
    @classmethod
    def _listify(cls, value: Any) -> Any:
        values = [value] if isinstance(value, str) else value
        if isinstance(values, list):
            if not values:
                raise ValueError("at least one cron expression must be specified")
            for item in values:
                if isinstance(item, str):
                    check_cron(item)
        return values


Reference = Annotated[
    EntityReference,
    BeforeValidator(to_entity_reference, json_schema_input_type=str | EntityReference),
]


class InstanceNameSelector(StrictModel):
    name: Annotated[str, Field(min_length=1)]


class InstanceHostnameSelector(StrictModel):
    hostname: Annotated[str, Field(min_length=1)]


class FleetInstanceSelector(StrictModel):
    fleet: Reference
    instance: Annotated[int, Field(ge=0)]


def _selector_kind(value: Any) -> str:
    if isinstance(value, dict):
        if "hostname" in value:
            return "~hostname"
        if "fleet" in value or "instance" in value:
            return "~fleet"
    if isinstance(value, InstanceHostnameSelector | FleetInstanceSelector):
        return "~hostname" if isinstance(value, InstanceHostnameSelector) else "~fleet"
    return "~name"


def _selector_shorthand(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


InstanceSelector = Annotated[
    Annotated[InstanceNameSelector, Tag("~name")]
    | Annotated[InstanceHostnameSelector, Tag("~hostname")]
    | Annotated[FleetInstanceSelector, Tag("~fleet")],
    Discriminator(_selector_kind),
    BeforeValidator(
        _selector_shorthand,
        json_schema_input_type=str
        | InstanceNameSelector
        | InstanceHostnameSelector
        | FleetInstanceSelector,
    ),
]


class VastAIOptions(StrictModel):
    """`backend_options` entry for vastai."""

    type: Literal["vastai"] = "vastai"
    offer_order: Literal["score", "price"] | None = None
    min_reliability: Annotated[float | None, Field(ge=0, le=1)] = None
    min_score: Annotated[int | None, Field(ge=0)] = None


def check_backend_options(value: list[VastAIOptions] | None) -> list[VastAIOptions] | None:
    seen: set[str] = set()
    for option in value or []:
        if option.type in seen:
            raise ValueError(f"backend_options has two entries for backend {excerpt(option.type)}")
        seen.add(option.type)
    return value


class ProvisioningParams(StrictModel):
    """Fields runs and fleets share: where offers come from and what they may cost."""

    backends: list[Backend] | None = None
    """Backends to consider for provisioning, e.g. `[aws, gcp]`."""
    regions: list[str] | None = None
    """Regions to consider, e.g. `[eu-west-1]` (case-insensitive)."""
    availability_zones: list[str] | None = None
    """Availability zones to consider."""
    instance_types: list[str] | None = None
    """Cloud instance types to consider, e.g. `[p5.48xlarge]`."""
    reservation: str | None = None
    """An existing capacity reservation (AWS capacity reservations/blocks, GCP reservations)."""
    spot_policy: SpotPolicy | None = None
    """`spot`, `on-demand` or `auto` (default `on-demand`)."""
    retry: Retry | None = None
    """Resubmit on failure: `true`, or `{on_events, duration}` (default `false`)."""
    max_price: Annotated[float | None, Field(gt=0.0)] = None
    """Maximum instance price per hour, in dollars."""
    idle_duration: IdleDuration = None
    """How long an idle instance is kept, e.g. `1h`; `off` keeps it."""
    tags: Tags = None
    """Tags copied to cloud resources."""
    backend_options: list[VastAIOptions] | None = None
    """Backend-specific options, e.g. `[{type: vastai, min_reliability: 0.95}]`."""

    _options = field_validator("backend_options")(check_backend_options)


class ProfileParams(ProvisioningParams):
    """Every profile field a run (and a preset) accepts."""

    max_duration: OffDuration = None
    """Stop the run after this long running, e.g. `2h`; `off` for no limit."""
    stop_duration: OffDuration = None
    """Grace period for a graceful stop (default `5m`); `off` waits forever."""
    creation_policy: Literal["reuse", "reuse-or-create"] | None = None
    """`reuse` (only existing idle instances) or `reuse-or-create` (default)."""
    utilization_policy: UtilizationPolicy | None = None
    """Stop the run when GPU utilization stays low."""
    startup_order: Literal["any", "master-first", "workers-first"] | None = None
    """Multi-node start order: `any`, `master-first`, `workers-first`."""
    stop_criteria: Literal["all-done", "master-done"] | None = None
    """Multi-node end: `all-done` or `master-done`."""
    schedule: Schedule | None = None
    """Start the run on a cron schedule (UTC)."""
    fleets: list[Reference] | None = None
    """Fleets to run on: names, `project/name` or `{project, name}`."""
    instances: Annotated[list[InstanceSelector] | None, Field(min_length=1)] = None
    """Only these fleet instances: names, `{hostname}` or `{fleet, instance}`."""
