"""`type: preset`: a model-serving preset (parsed and validated only; Dockyard does not run it).

Field names and checks are dstack 0.22.5's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from schemas.base import (
    ConfigModel,
    EntityReference,
    FieldConflict,
    StrictModel,
    to_entity_reference,
)
from schemas.mounts import Env
from schemas.profile import ProfileParams
from schemas.service_parts import DiscriminateBool, GatewayBool

PositiveInt = Annotated[int, Field(gt=0)]


def _non_empty(value: str, what: str) -> str:
    if not value.strip():
        raise ValueError(f"{what} must be a non-empty string")
    return value


class PresetModelRepo(StrictModel):
    repo: str
    name: str | None = None

    @field_validator("repo", "name")
    @classmethod
    def _filled(cls, value: str | None) -> str | None:
        return None if value is None else _non_empty(value, "a model repo or name")


class PresetModelBase(StrictModel):
    base: str

    @field_validator("base")
    @classmethod
    def _filled(cls, value: str) -> str:
        return _non_empty(value, "a base model")


def _model_kind(value: Any) -> str:
    is_base = isinstance(value, PresetModelBase) or (isinstance(value, dict) and "base" in value)
    return "~base" if is_base else "~repo"


def _model_shorthand(value: Any) -> Any:
    return {"repo": _non_empty(value, "model")} if isinstance(value, str) else value


PresetModel = Annotated[
    Annotated[PresetModelRepo, Tag("~repo")] | Annotated[PresetModelBase, Tag("~base")],
    Discriminator(_model_kind),
    BeforeValidator(_model_shorthand),
]


class PresetAgentConfig(StrictModel):
    provider: Literal["claude", "codex"]
    model: str | None = None
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None

    @model_validator(mode="after")
    def _effort(self) -> PresetAgentConfig:
        if self.provider == "codex" and self.effort == "max":
            raise FieldConflict("effort", "effort `max` is not supported by `codex`")
        return self


class PresetPromptFile(StrictModel):
    path: str

    @field_validator("path")
    @classmethod
    def _filled(cls, value: str) -> str:
        return _non_empty(value, "a prompt path")


def _prompt_kind(value: Any) -> str:
    is_text = isinstance(value, str | int | float) and not isinstance(value, bool)
    return "~text" if is_text else "~file"


def _model_not_required(schema: dict[str, Any]) -> None:
    """JSON Schema: `base:` or `repo:` may stand in for `model:`."""
    schema["required"] = [name for name in schema.get("required", []) if name != "model"]
    if not schema["required"]:
        del schema["required"]


class PresetConfiguration(ProfileParams, ConfigModel):
    """`type: preset`."""

    model_config = ConfigDict(json_schema_extra=_model_not_required)

    type: Literal["preset"] = "preset"
    model: PresetModel
    base: str | None = None
    repo: str | None = None
    prompt: (
        Annotated[
            Annotated[str, Tag("~text")] | Annotated[PresetPromptFile, Tag("~file")],
            Discriminator(_prompt_kind),
        ]
        | None
    ) = None
    min_context_length: PositiveInt | None = None
    max_ttft: PositiveInt | None = None
    trials: PositiveInt | None = None
    previous: list[str] | None = None
    concurrency: PositiveInt | None = None
    input_tokens: PositiveInt | None = None
    output_tokens: Annotated[int | None, Field(ge=2)] = None
    shared_prefix_tokens: Annotated[int | None, Field(ge=0)] = None
    dataset: str | None = None
    baseline: bool | None = None
    gateway: (
        Annotated[
            GatewayBool
            | Annotated[
                EntityReference,
                BeforeValidator(to_entity_reference, json_schema_input_type=str | EntityReference),
                Tag("~other"),
            ],
            DiscriminateBool,
        ]
        | None
    ) = None
    agent: PresetAgentConfig | None = None
    env: Env

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        base, repo = value.get("base"), value.get("repo")
        if base and repo:
            raise FieldConflict("repo", "`base` and `repo` are mutually exclusive")
        if base or repo:
            if value.get("model") is not None:
                raise FieldConflict("model", "`model` cannot be combined with `base`/`repo`")
            value = {k: v for k, v in value.items() if k not in ("base", "repo")}
            value["model"] = {"base": base} if base else {"repo": repo}
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: Any) -> Any:
        if isinstance(value, str):
            _non_empty(value, "the prompt")
            if len(value) > 10_000:
                raise ValueError("the prompt must be at most 10000 characters")
        return value

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = _non_empty(value, "dataset").strip()
        if value == "random":
            raise ValueError("`random` is not a dataset; omit `dataset` for synthetic prompts")
        return value

    @model_validator(mode="after")
    def _tokens(self) -> PresetConfiguration:
        if self.dataset is not None:
            for field in ("input_tokens", "output_tokens", "shared_prefix_tokens"):
                if getattr(self, field) is not None:
                    raise FieldConflict(field, f"`{field}` cannot be set with `dataset`")
        if self.shared_prefix_tokens is not None:
            limit = self.input_tokens or 1024
            if self.shared_prefix_tokens >= limit:
                raise FieldConflict(
                    "shared_prefix_tokens", f"must be less than input_tokens ({limit})"
                )
        return self
