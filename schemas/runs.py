"""Run configurations: the fields every run has, `dev-environment` and `task`.

`service` lives in `service.py`. Field names, defaults and checks are dstack 0.22.5's;
cross-field errors are raised as `FieldConflict` so `parse_config` can point at the field
that conflicts.
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
    """The run name (lowercase letters, digits, `-`). Random if unset."""
    image: str | None = None
    """Docker image to run. Default: dstack's base image (Ubuntu, CUDA, Python, uv)."""
    user: str | None = None
    """User inside the container, `user[:group]` (names or ids)."""
    privileged: bool = False
    """Run the container in privileged mode."""
    entrypoint: str | None = None
    """Docker entrypoint."""
    working_dir: str | None = None
    """Working directory in the container (default: the image's); relative: legacy, /workflow/…"""
    home_dir: str = "/root"
    """Deprecated."""
    registry_auth: RegistryAuth | None = None
    """Credentials for a private image registry."""
    python: PythonVersion | None = None
    """Python version of the default image: `3.9` to `3.15`. Not with `image`."""
    nvcc: bool | None = None
    """Use the default image variant with the CUDA compiler."""
    single_branch: bool | None = None
    """Clone only the current branch of the repo."""
    env: Env
    """Environment variables: a list of `NAME=value` / `NAME`, or a mapping."""
    shell: str | None = None
    """`sh`, `bash`, or an absolute path (default `/bin/bash` for the default image)."""
    resources: Resources
    """Resource requirements: cpu, memory, gpu, disk, shm_size."""
    priority: Annotated[int | None, Field(ge=0, le=100)] = None
    """Run priority 0-100; higher is provisioned first (default 0)."""
    volumes: list[MountPoint] = []
    """Volume mounts: `name:/path`, `/host/path:/path`, or mappings."""
    docker: bool | None = None
    """Docker-in-Docker (forces privileged). Not with `image`, `python`, `nvcc`."""
    repos: list[RepoSpec] = []
    """Git repo to clone into the run (at most one): path, URL or mapping."""
    files: list[FilePathMapping] = []
    """Local files to upload: `local[:container]` or `{local_path, path}`."""
    dstack: bool = False
    """Make the server reachable from inside the run."""
    setup: list[str] = []
    """Deprecated."""

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
        """dstack's server fills these before storing a run spec."""
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
    """Ports to forward: `8080`, `\"80:8080\"`, `\"*:8080\"`."""
    ide: Literal["vscode", "cursor", "windsurf", "zed"] | None = None
    """IDE to connect: `vscode`, `cursor`, `windsurf`, `zed` (unset: SSH only)."""
    version: str | None = None
    """IDE version (windsurf: `version@commit`)."""
    init: list[str] = []
    """Commands to run when the environment starts."""
    inactivity_duration: int | None = None
    """Stop after this long without connections, e.g. `2h`; `off` never."""

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
    """Group name (default: its position, `0`, `1`, ...)."""
    nodes: Annotated[int, Field(ge=1)] = 1
    """Number of nodes in the group (default 1)."""
    resources: Resources
    """Resources of each node of the group (not inherited)."""
    commands: list[str] = []
    """Commands the nodes of the group run."""
    ports: list[Port] = []
    """Ports to forward for the group."""


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
    """Ports to forward: `8080`, `\"80:8080\"`, `\"*:8080\"`."""
    commands: list[str] = []
    """Shell commands to run (required unless `image` is set)."""
    nodes: Annotated[int | None, Field(ge=1)] = None
    """Number of nodes for a multi-node task (default 1). Not with `groups`."""
    groups: list[NodeGroup] | None = None
    """Node groups of a heterogeneous multi-node task. Not with `nodes`."""

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
                fill_field(self, "nodes", 1)  # dstack's server default
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
