"""Service-only parts: `scaling`, `rate_limits`, `probes`, `model`, `router`, replica groups.

Used by `runs.ServiceConfiguration`. Defaults and limits are dstack's: scaling windows
30 s, 60 s or 300 s; probe timeout and interval ≥ 1 s; rate-limit prefixes unique.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from schemas.base import FieldConflict, StrictModel
from schemas.resources import Resources
from schemas.scalars import Duration, GroupName, IntRange

_SCALING_WINDOWS = (30, 60, 300)
MAX_PROBES = 10  # dstack server defaults (DSTACK_SERVER_MAX_PROBES_PER_JOB, …_MAX_PROBE_TIMEOUT)
MAX_PROBE_TIMEOUT = 300
_MAX_INT64 = 2**63 - 1
PythonVersion = Literal["3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]


def to_python_version(value: Any) -> Any:
    """YAML `3.10` is the float 3.1: read it back as "3.10"."""
    if isinstance(value, float):
        text = str(value)
        return "3.10" if text == "3.1" else text
    return value


class ScalingSpec(StrictModel):
    """Autoscaling on requests per second."""

    metric: Literal["rps"]
    target: Annotated[float, Field(gt=0)]
    window: Duration | None = None
    scale_up_delay: Duration = 300
    scale_down_delay: Duration = 600

    @field_validator("window")
    @classmethod
    def _window(cls, value: int | None) -> int | None:
        if value is not None and value not in _SCALING_WINDOWS:
            raise ValueError("window must be one of `30s`, `60s`, `300s`")
        return value


class IPAddressKey(StrictModel):
    type: Literal["ip_address"] = "ip_address"


class HeaderKey(StrictModel):
    type: Literal["header"] = "header"
    header: Annotated[str, Field(pattern=r"^[a-zA-Z0-9-_]+$", max_length=500)]


class RateLimit(StrictModel):
    """One rate limit per path prefix, partitioned by client IP or a header."""

    prefix: Annotated[str, Field(max_length=4094, pattern=r"^/[^\s\\{}]*$")] = "/"
    key: Annotated[IPAddressKey | HeaderKey, Field(discriminator="type")] = IPAddressKey()
    rps: Annotated[float, Field(ge=1 / 60, le=_MAX_INT64 // 60)]
    burst: Annotated[int, Field(ge=0, le=_MAX_INT64)] = 0


class HTTPHeader(StrictModel):
    name: Annotated[str, Field(min_length=1, max_length=256)]
    value: Annotated[str, Field(min_length=1, max_length=2048)]


class ProbeConfig(StrictModel):
    """An HTTP readiness probe of a service replica."""

    type: Literal["http"]
    url: str | None = None
    method: Literal["get", "post", "put", "delete", "patch", "head"] | None = None
    headers: Annotated[list[HTTPHeader], Field(max_length=16)] = []
    body: Annotated[str | None, Field(min_length=1, max_length=2048)] = None
    timeout: Duration | None = None
    interval: Duration | None = None
    ready_after: Annotated[int | None, Field(ge=1)] = None
    until_ready: bool | None = None

    @field_validator("timeout", "interval")
    @classmethod
    def _at_least_one_second(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError("cannot be shorter than 1s")
        return value

    @field_validator("timeout")
    @classmethod
    def _at_most_five_minutes(cls, value: int | None) -> int | None:
        if value is not None and value > MAX_PROBE_TIMEOUT:
            raise ValueError(f"cannot be longer than {MAX_PROBE_TIMEOUT}s (server limit)")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith("/"):
            raise ValueError("must start with `/`")
        if len(value) > 2048:
            raise ValueError("cannot be longer than 2048 characters")
        if not value.isprintable():
            raise ValueError("cannot contain non-printable characters")
        return value

    @model_validator(mode="after")
    def _body_needs_method(self) -> ProbeConfig:
        if self.body is not None and self.method in ("get", "head"):
            raise FieldConflict("body", f"cannot set a request body for `{self.method}`")
        return self


class TGIChatModel(StrictModel):
    type: Literal["chat"] = "chat"
    name: str
    format: Literal["tgi"]
    chat_template: str | None = None
    eos_token: str | None = None


class OpenAIChatModel(StrictModel):
    type: Literal["chat"] = "chat"
    name: str
    format: Literal["openai"]
    prefix: str = "/v1"


def to_chat_model(value: Any) -> Any:
    """`model: <name>` is an OpenAI-compatible chat model at `/v1`."""
    if isinstance(value, str):
        return {"type": "chat", "name": value, "format": "openai"}
    return value


ChatModel = Annotated[TGIChatModel | OpenAIChatModel, Field(discriminator="format")]


class RouterConfig(StrictModel):
    """The router in front of a replica group (`sglang` is the legacy name of `smg`)."""

    type: Literal["smg", "dynamo"] = "smg"

    @field_validator(
        "type", mode="before", json_schema_input_type=Literal["smg", "dynamo", "sglang"]
    )
    @classmethod
    def _legacy(cls, value: Any) -> Any:
        return "smg" if value == "sglang" else value


def check_replicas(value: IntRange) -> IntRange:
    if value.max is None:
        raise ValueError("the maximum number of replicas is required")
    low = 0 if value.min is None else value.min
    if low < 0:
        raise ValueError("the minimum number of replicas must be ≥ 0")
    return value if value.min is not None else IntRange(min=low, max=value.max)


def check_scaling(replicas: IntRange | None, scaling: ScalingSpec | None) -> None:
    if replicas is None:
        return
    if replicas.min != replicas.max and scaling is None:
        raise FieldConflict("replicas", "a `replicas` range needs `scaling`")
    if replicas.min == replicas.max and scaling is not None:
        raise FieldConflict("scaling", "`scaling` needs `replicas` to be a range")


def _check_image_sources(group: ReplicaGroup) -> None:
    if group.image is not None and group.python is not None:
        raise FieldConflict("python", "`image` and `python` are mutually exclusive")
    if group.docker is True:
        for other in ("image", "python", "nvcc"):
            if getattr(group, other):
                raise FieldConflict("docker", f"`{other}` and `docker` are mutually exclusive")
        if group.privileged is False:
            raise FieldConflict("privileged", "`docker: true` needs privileged mode")


def _count_alias_schema(schema: dict[str, Any]) -> None:
    """JSON Schema: `count` is accepted for `replicas`, so neither is required alone."""
    properties = schema.get("properties", {})
    if "replicas" in properties:
        properties["count"] = {**properties["replicas"], "description": "Alias of `replicas`"}
    schema["required"] = [name for name in schema.get("required", []) if name != "replicas"]
    if not schema["required"]:
        del schema["required"]


class ReplicaGroup(StrictModel):
    """One group of a heterogeneous service (`groups:` or legacy list `replicas:`)."""

    model_config = ConfigDict(json_schema_extra=_count_alias_schema)

    name: GroupName | None = None
    replicas: IntRange
    scaling: ScalingSpec | None = None
    resources: Resources
    spot_policy: Literal["spot", "on-demand", "auto"] | None = None
    reservation: str | None = None
    commands: list[str] = []
    image: str | None = None
    python: Annotated[PythonVersion | None, Field()] = None
    nvcc: bool | None = None
    docker: bool | None = None
    privileged: bool | None = None
    router: RouterConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _count_alias(cls, value: Any) -> Any:
        if isinstance(value, dict) and "count" in value:
            value = dict(value)
            count = value.pop("count")
            value.setdefault("replicas", count)
        return value

    @field_validator("python", mode="before", json_schema_input_type=PythonVersion | float | None)
    @classmethod
    def _python(cls, value: Any) -> Any:
        return to_python_version(value)

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: IntRange) -> IntRange:
        return check_replicas(value)

    @model_validator(mode="after")
    def _consistent(self) -> ReplicaGroup:
        _check_image_sources(self)
        check_scaling(self.replicas, self.scaling)
        return self


_BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "t", "f", "y", "n", "1", "0"})


def _is_bool(value: Any) -> str:
    """dstack tries `bool` first: `gateway: yes`, `1` or `"false"` are booleans, not names."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return "~bool"
    if isinstance(value, str) and value.lower() in _BOOL_WORDS:
        return "~bool"
    return "~other"


GatewayBool = Annotated[bool, Tag("~bool")]
DiscriminateBool = Discriminator(_is_bool)
