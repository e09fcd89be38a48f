"""Run configurations: the fields every run has, `dev-environment` and `task`.

`service` lives in `service.py`. Field names, defaults and checks are dstack 0.22.5's
(reference §1.1); cross-field errors are raised as `FieldConflict` so `parse_config` can
point at the field that conflicts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from schemas.base import ConfigModel, FieldConflict, StrictModel, fill_field
from schemas.defaulting import with_server_defaults
from schemas.mounts import (
    Env,
    FilePathMapping,
    MountPoint,
    Port,
    RegistryAuth,
    RepoSpec,
    check_unix_user,
)
from schemas.profile import ProfileParams
from schemas.resources import Resources
from schemas.scalars import GroupName, ResourceName, parse_off_duration
from schemas.service_parts import PythonVersion, to_python_version


class BaseRunConfiguration(ProfileParams, ConfigModel):
    """Fields of every run type."""

    name: ResourceName | None = None
    image: str | None = None
    user: str | None = None
    privileged: bool = False
    entrypoint: str | None = None
    working_dir: str | None = None
    home_dir: str = "/root"
    registry_auth: RegistryAuth | None = None
    python: PythonVersion | None = None
    nvcc: bool | None = None
    single_branch: bool | None = None
    env: Env
    shell: str | None = None
    resources: Resources
    priority: Annotated[int | None, Field(ge=0, le=100)] = None
    volumes: list[MountPoint] = []
    docker: bool | None = None
    repos: list[RepoSpec] = []
    files: list[FilePathMapping] = []
    dstack: bool = False
    setup: list[str] = []

    @field_validator("python", mode="before", json_schema_input_type=PythonVersion | float | None)
    @classmethod
    def _python(cls, value: Any) -> Any:
        return to_python_version(value)

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        return check_unix_user(value)

    @field_validator("shell")
    @classmethod
    def _shell(cls, value: str | None) -> str | None:
        if value is None or value in ("sh", "bash") or PurePosixPath(value).is_absolute():
            return value
        raise ValueError("use `sh`, `bash`, or an absolute path")

    @field_validator("working_dir")
    @classmethod
    def _absolute_working_dir(cls, value: str | None) -> str | None:
        """dstack's CLI rule: absolute POSIX path, or starting with `~`."""
        if value is None or value.startswith("~") or PurePosixPath(value).is_absolute():
            return value
        raise ValueError(f"working_dir must be absolute: {value!r}")

    @field_validator("repos")
    @classmethod
    def _one_repo(cls, value: list[RepoSpec]) -> list[RepoSpec]:
        if len(value) > 1:
            raise FieldConflict((1,), "at most one repo is supported")
        return value

    @model_validator(mode="after")
    def _image_sources(self) -> BaseRunConfiguration:
        if self.image is not None and self.python is not None:
            raise FieldConflict("python", "`image` and `python` are mutually exclusive")
        if self.docker is True:
            for other in ("image", "python", "nvcc"):
                if getattr(self, other):
                    raise FieldConflict("docker", f"`{other}` and `docker` are mutually exclusive")
        return self

    @model_validator(mode="after")
    def _server_defaults(self) -> BaseRunConfiguration:
        """dstack's server fills these before storing a run spec (reference §1.9)."""
        if self.priority is None:
            fill_field(self, "priority", 0)
        fill_field(self, "resources", with_server_defaults(self.resources, self.image, self.docker))
        return self


def check_commands_or_image(config: Any) -> None:
    """Tasks and services need something to run: `commands` or an `image`."""
    if getattr(config, "groups", None) is not None:
        return
    if not config.commands and not config.image:
        raise FieldConflict("commands", "either `commands` or `image` must be set")


class DevEnvironmentConfiguration(BaseRunConfiguration):
    """`type: dev-environment`: an IDE-attached, long-lived run."""

    type: Literal["dev-environment"] = "dev-environment"
    ports: list[Port] = []
    ide: Literal["vscode", "cursor", "windsurf", "zed"] | None = None
    version: str | None = None
    init: list[str] = []
    inactivity_duration: int | None = None

    @field_validator(
        "inactivity_duration", mode="before", json_schema_input_type=int | str | bool | None
    )
    @classmethod
    def _inactivity(cls, value: Any) -> Any:
        parsed = parse_off_duration(value)
        return parsed if isinstance(parsed, int) else None

    @field_validator("entrypoint")
    @classmethod
    def _no_entrypoint(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("`entrypoint` is not supported for dev-environment")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DevEnvironmentConfiguration:
        if self.version and self.ide is None:
            raise FieldConflict("version", "`version` requires `ide` to be set")
        if self.ide == "windsurf" and self.version and "@" not in self.version:
            raise FieldConflict("version", "windsurf `version` must look like `1.106.0@<commit>`")
        if self.dstack and self.inactivity_duration is not None:
            raise FieldConflict("dstack", "`dstack` cannot be used with `inactivity_duration`")
        return self


class NodeGroup(StrictModel):
    """One group of a heterogeneous multi-node task."""

    name: GroupName | None = None
    nodes: Annotated[int, Field(ge=1)] = 1
    resources: Resources
    commands: list[str] = []
    ports: list[Port] = []


def name_groups(value: Any) -> Any:
    """Before-validator: unnamed groups are named by position (`"0"`, `"1"`, …)."""
    if not isinstance(value, list):
        return value
    if not value:
        raise ValueError("`groups` cannot be an empty list")
    named = []
    for index, item in enumerate(value):
        if isinstance(item, dict) and item.get("name") is None:
            item = {**item, "name": str(index)}
        named.append(item)
    return named


def check_unique_names(groups: list[Any], kind: str) -> None:
    counts = Counter(group.name for group in groups)
    for index, group in enumerate(groups):
        if counts[group.name] > 1:
            raise FieldConflict((index, "name"), f"duplicate {kind} group name {group.name!r}")


class TaskConfiguration(BaseRunConfiguration):
    """`type: task`: runs its commands to completion, on one or more nodes."""

    type: Literal["task"] = "task"
    ports: list[Port] = []
    commands: list[str] = []
    nodes: Annotated[int | None, Field(ge=1)] = None
    groups: list[NodeGroup] | None = None

    @model_validator(mode="before")
    @classmethod
    def _nodes_xor_groups(cls, value: Any) -> Any:
        if isinstance(value, dict) and None not in (value.get("groups"), value.get("nodes")):
            raise FieldConflict("groups", "`nodes` and `groups` are mutually exclusive")
        return value

    @field_validator("groups", mode="before")
    @classmethod
    def _name_groups(cls, value: Any) -> Any:
        return name_groups(value)

    @field_validator("groups")
    @classmethod
    def _unique(cls, value: list[NodeGroup] | None) -> list[NodeGroup] | None:
        if value is not None:
            check_unique_names(value, "node")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TaskConfiguration:
        check_commands_or_image(self)
        if self.groups is None:
            if self.nodes is None:
                fill_field(self, "nodes", 1)  # server default (reference §1.9)
            return self
        for field in ("commands", "ports", "entrypoint"):
            if getattr(self, field):
                raise FieldConflict(field, f"top-level `{field}` is not allowed with `groups`")
        for index, group in enumerate(self.groups):
            if not group.commands and self.image is None:
                raise FieldConflict(
                    ("groups", index), "set `commands` in the group or `image` on the task"
                )
        groups = [
            group.model_copy(
                update={"resources": with_server_defaults(group.resources, self.image, self.docker)}
            )
            for group in self.groups
        ]
        if groups != self.groups:
            fill_field(self, "groups", groups)
        return self
