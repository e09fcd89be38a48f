"""`type: service`: a long-running, load-balanced run with replicas, probes and a model.

Field names, defaults and checks are dstack 0.22.5's; the service-only
parts (scaling, probes, rate limits, replica groups) are in `service_parts.py`.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Tag, field_validator, model_validator

from schemas.base import EntityReference, FieldConflict, fill_field, to_entity_reference
from schemas.defaulting import with_server_defaults
from schemas.mounts import PortMapping, parse_port
from schemas.problems import excerpt
from schemas.runs import (
    BaseRunConfiguration,
    check_commands_or_image,
    check_unique_names,
    name_groups,
)
from schemas.scalars import IntRange
from schemas.service_parts import (
    MAX_PROBES,
    ChatModel,
    DiscriminateBool,
    GatewayBool,
    OpenAIChatModel,
    ProbeConfig,
    RateLimit,
    ReplicaGroup,
    ScalingSpec,
    TGIChatModel,
    check_replicas,
    check_scaling,
    to_chat_model,
)

_PORT_PAIR_RE = re.compile(r"^[0-9]+:[0-9]+$")


def parse_service_port(value: Any) -> Any:
    """`port: 8000` is served on 80; `"80:8000"` or a mapping set both sides."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return {"local_port": 80, "container_port": value}
    if isinstance(value, str) and not _PORT_PAIR_RE.match(value):
        raise ValueError(f"invalid port {excerpt(value)}: use `8000` or `80:8000`")
    return parse_port(value)


def _keep(value: Any) -> Any:
    """Identity; carries the legacy input form (`replicas:` as a list) into the JSON Schema."""
    return value


Gateway = Annotated[
    GatewayBool
    | Annotated[
        EntityReference,
        BeforeValidator(to_entity_reference, json_schema_input_type=str | EntityReference),
        Tag("~other"),
    ],
    DiscriminateBool,
]
# (service-level field, predicate on the service, group fields it may not be mixed with)
_EXCLUSIVE_WITH_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("image", ("image", "docker", "python", "nvcc")),
    ("docker", ("docker", "image", "python", "nvcc")),
    ("python", ("python", "image", "docker")),
    ("nvcc", ("nvcc", "image", "docker")),
    ("privileged", ("privileged",)),
    ("spot_policy", ("spot_policy",)),
    ("reservation", ("reservation",)),
)
_TRUE_ONLY = ("docker", "privileged", "nvcc")


class ServiceConfiguration(BaseRunConfiguration):
    """`type: service`."""

    type: Literal["service"] = "service"
    commands: list[str] = []
    """Shell commands to run (required unless `image` is set)."""
    port: Annotated[
        PortMapping,
        BeforeValidator(parse_service_port, json_schema_input_type=int | str | PortMapping),
    ]
    """Port the application listens on: `8000` or `\"80:8000\"`."""
    gateway: Gateway | None = None
    """Gateway name or `project/name`; `false` for none, `true` for the default."""
    strip_prefix: bool = True
    """Strip `/proxy/services/<project>/<run>/` when proxying (no gateway)."""
    model: Annotated[
        ChatModel | None,
        BeforeValidator(
            to_chat_model, json_schema_input_type=str | TGIChatModel | OpenAIChatModel | None
        ),
    ] = None
    """Model for the OpenAI-compatible endpoint: a name, or `{format: openai|tgi, name}`."""
    https: bool | Literal["auto"] | None = None
    """`true`, `false` or `auto` (default `true`)."""
    auth: bool = True
    """Require a project member's token (default `true`)."""
    scaling: ScalingSpec | None = None
    """Autoscaling rule, required when `replicas` is a range."""
    rate_limits: list[RateLimit] = []
    """Rate limits per path prefix (gateway only)."""
    probes: list[ProbeConfig] | None = None
    """HTTP readiness probes (`[]` for none)."""
    replicas: Annotated[
        IntRange | None,
        BeforeValidator(_keep, json_schema_input_type=IntRange | list[ReplicaGroup] | None),
    ] = None
    """Number of replicas: `2` or a range `0..4` (default 1). Not with `groups`."""
    groups: list[ReplicaGroup] | None = None
    """Replica groups of a heterogeneous service. Not with `replicas`."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_groups(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if value.get("groups") is None and isinstance(value.get("replicas"), list):
            value = {**value, "groups": value["replicas"]}
            del value["replicas"]
        if value.get("groups") is not None and value.get("replicas") is not None:
            raise FieldConflict("groups", "`replicas` and `groups` are mutually exclusive")
        return value

    @field_validator("groups", mode="before")
    @classmethod
    def _name_groups(cls, value: Any) -> Any:
        return name_groups(value)

    @field_validator("groups")
    @classmethod
    def _unique_groups(cls, value: list[ReplicaGroup] | None) -> list[ReplicaGroup] | None:
        if value is not None:
            check_unique_names(value, "replica")
        return value

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: IntRange | None) -> IntRange | None:
        return None if value is None else check_replicas(value)

    @field_validator("rate_limits")
    @classmethod
    def _unique_prefixes(cls, value: list[RateLimit]) -> list[RateLimit]:
        counts = Counter(limit.prefix for limit in value)
        for index, limit in enumerate(value):
            if counts[limit.prefix] > 1:
                raise FieldConflict((index, "prefix"), f"prefix {excerpt(limit.prefix)} used twice")
        return value

    @field_validator("probes")
    @classmethod
    def _unique_probes(cls, value: list[ProbeConfig] | None) -> list[ProbeConfig] | None:
        if len(value or []) > MAX_PROBES:
            raise FieldConflict((MAX_PROBES,), f"at most {MAX_PROBES} probes are allowed")
        for index, probe in enumerate(value or []):
            if probe in (value or [])[:index]:
                raise FieldConflict((index,), "probes must be unique")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ServiceConfiguration:
        check_commands_or_image(self)
        check_scaling(self.replicas, self.scaling)
        if self.schedule is not None and all(low == 0 for low in self._replica_minimums()):
            raise FieldConflict("schedule", "a service that scales to zero cannot have a schedule")
        if self.groups is not None:
            self._check_groups(self.groups)
            fill_field(self, "groups", [self._group_defaults(group) for group in self.groups])
        return self

    def _replica_minimums(self) -> list[int | None]:
        if self.groups is not None:
            return [group.replicas.min for group in self.groups]
        return [1 if self.replicas is None else self.replicas.min]

    def _group_defaults(self, group: ReplicaGroup) -> ReplicaGroup:
        image = group.image if group.image is not None else self.image
        docker = group.docker if group.docker is not None else self.docker
        resources = with_server_defaults(group.resources, image, docker)
        if resources is group.resources:
            return group
        return group.model_copy(update={"resources": resources})

    def _check_groups(self, groups: list[ReplicaGroup]) -> None:
        for field in ("scaling", "commands"):
            if getattr(self, field):
                raise FieldConflict(field, f"top-level `{field}` is not allowed with `groups`")
        for field, group_fields in _EXCLUSIVE_WITH_GROUPS:
            value = getattr(self, field)
            is_set = value is True if field in _TRUE_ONLY else value is not None
            if not is_set:
                continue
            for index, group in enumerate(groups):
                for other in group_fields:
                    if getattr(group, other) is not None:
                        raise FieldConflict(
                            ("groups", index, other),
                            f"`{field}` is set on the service; `{other}` cannot be set per group",
                        )
        for index, group in enumerate(groups):
            if not group.commands and group.image is None and self.image is None:
                raise FieldConflict(
                    ("groups", index), "set `commands` or `image` in the group or on the service"
                )
        routers = [index for index, group in enumerate(groups) if group.router is not None]
        if len(routers) > 1:
            raise FieldConflict(("groups", routers[1], "router"), "at most one group may route")
        if routers and (groups[routers[0]].replicas.min, groups[routers[0]].replicas.max) != (1, 1):
            raise FieldConflict(
                ("groups", routers[0], "replicas"), "a router group needs 1 replica"
            )
