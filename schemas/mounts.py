"""What a run brings into its container: env, ports, volumes, repos, files, registry auth.

Each item accepts dstack's shorthand strings and its mapping form; both normalize to the
mapping form (`8080` -> `{local_port: 8080, container_port: 8080}`, `data:/data` ->
`{name: data, path: /data}`, `- HF_TOKEN` -> `{HF_TOKEN: null}` meaning "filled from the
submitter's environment"). Used by the run and group models.
"""

from __future__ import annotations

import re
import string
from pathlib import PurePosixPath, PureWindowsPath
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator, model_validator

from schemas.base import FieldConflict, StrictModel
from schemas.problems import excerpt

_ENV_ITEM_RE = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_]*)(=.*$|$)")
_PORT_RE = re.compile(r"^(?:(\d+|\*):)?(\d+)$")
_COMMIT_RE = re.compile(r"[0-9a-fA-F]{4,64}")
ValidPort = Annotated[int, Field(gt=0, le=65535)]


def parse_env(value: Any) -> Any:
    """`env` list form (`K=V`, `K`) or mapping form -> `{K: V | None}`."""
    if not isinstance(value, list):
        return value
    env: dict[str, str | None] = {}
    for index, item in enumerate(value):
        if isinstance(item, int | float) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str) or not _ENV_ITEM_RE.match(item):
            raise FieldConflict(
                (index,), f"invalid env item {excerpt(item)}: use `NAME=value` or `NAME`"
            )
        key, sep, rest = item.partition("=")
        if key in env:
            raise FieldConflict((index,), f"duplicate environment variable: {key}")
        env[key] = rest if sep else None
    return env


Env = Annotated[
    dict[str, str | None],
    BeforeValidator(parse_env, json_schema_input_type=list[str] | dict[str, str | None]),
    Field(default_factory=dict),
]


class PortMapping(StrictModel):
    """`local_port` is None for `*:8080` (any free local port)."""

    local_port: ValidPort | None = None
    container_port: ValidPort


def parse_port(value: Any) -> Any:
    """`8080` | `"80:8080"` | `"*:8080"` | mapping -> PortMapping fields."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"local_port": value, "container_port": value}
    if isinstance(value, str):
        match = _PORT_RE.match(value.strip())
        if not match:
            raise ValueError(f"invalid port {excerpt(value)}: use `8080`, `80:8080` or `*:8080`")
        local, container = match.groups()
        if local is None:
            local = container
        return {"local_port": None if local == "*" else int(local), "container_port": container}
    return value


Port = Annotated[
    PortMapping, BeforeValidator(parse_port, json_schema_input_type=int | str | PortMapping)
]


def check_mount_path(value: str) -> str:
    if not value:
        raise ValueError("empty path")
    path = PurePosixPath(value)
    if not path.is_absolute():
        raise ValueError(f"path must be absolute: {value}")
    if ".." in path.parts:
        raise ValueError(f"`..` is not allowed in a path: {value}")
    return str(path)


class VolumeMountPoint(StrictModel):
    """A network volume (`name`, or a list of names, one per node) mounted at `path`."""

    name: str | list[str]
    path: str

    _path = field_validator("path")(check_mount_path)


class InstanceMountPoint(StrictModel):
    """A directory of the host (`instance_path`) mounted at `path`."""

    instance_path: str
    path: str
    optional: bool = False

    _instance_path = field_validator("instance_path")(check_mount_path)
    _path = field_validator("path")(check_mount_path)


def parse_mount(value: Any) -> Any:
    """`name:/path` or `/host:/path` -> a mount point mapping."""
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 2:
            raise ValueError(f"invalid mount point {excerpt(value)}: use `<volume>:<path>`")
        source, path = parts
        if "/" in source:
            return {"instance_path": source, "path": path}
        return {"name": source, "path": path}
    return value


def _mount_kind(value: Any) -> str:
    if isinstance(value, InstanceMountPoint) or (
        isinstance(value, dict) and "instance_path" in value
    ):
        return "~instance"
    return "~volume"


MountPoint = Annotated[
    Annotated[VolumeMountPoint, Tag("~volume")] | Annotated[InstanceMountPoint, Tag("~instance")],
    Discriminator(_mount_kind),
    BeforeValidator(
        parse_mount, json_schema_input_type=str | VolumeMountPoint | InstanceMountPoint
    ),
]


def _split_drive(parts: list[str]) -> list[str]:
    """Re-join a Windows drive letter (`C:\\x`) that a `:` split tore apart."""
    if (
        len(parts) > 1
        and len(parts[0]) == 1
        and parts[0] in string.ascii_letters
        and parts[1][:1] in ("\\", "/")
    ):
        return [f"{parts[0]}:{parts[1]}", *parts[2:]]
    return parts


class RepoSpec(StrictModel):
    """A Git repo cloned into the run: `local_path` or `url` (exactly one)."""

    json_shorthands = ("string",)

    local_path: str | None = None
    url: str | None = None
    branch: str | None = None
    hash: str | None = None
    path: str = "."
    if_exists: Literal["error", "skip"] = "error"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parts = value.split(":")
        is_url = False
        if len(parts) > 1 and ("@" in parts[0] or parts[1].startswith("//")):
            parts = [f"{parts[0]}:{parts[1]}", *parts[2:]]
            is_url = True
        else:
            parts = _split_drive(parts)
        if len(parts) > 2:
            raise ValueError(f"invalid repo {excerpt(value)}: use `<path or url>[:<repo path>]`")
        spec: dict[str, str] = {"url" if is_url else "local_path": parts[0]}
        if len(parts) == 2:
            spec["path"] = parts[1]
        return spec

    @field_validator("url", "branch", "hash")
    @classmethod
    def _never_an_option(cls, value: str | None) -> str | None:
        """The job hands these to git: none may read as an option (`--upload-pack=...`
        runs a command) or carry a control character or a space."""
        if value is None:
            return value
        if value.startswith("-"):
            raise ValueError(f"{excerpt(value)} starts with `-`, which git would read as an option")
        if not value or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError(f"{excerpt(value)} is empty or has spaces or control characters")
        return value

    @field_validator("hash")
    @classmethod
    def _commit_hash(cls, value: str | None) -> str | None:
        if value is not None and not _COMMIT_RE.fullmatch(value):
            raise ValueError(f"{excerpt(value)} is not a commit hash: use 4 to 64 hex digits")
        return value

    @field_validator("path")
    @classmethod
    def _no_tilde_user(cls, value: str) -> str:
        if value.startswith("~") and PurePosixPath(value).parts[0] != "~":
            raise ValueError("`~username` syntax is not supported")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> RepoSpec:
        if self.local_path and self.url:
            raise FieldConflict("url", "`local_path` and `url` are mutually exclusive")
        if not self.local_path and not self.url:
            raise ValueError("either `local_path` or `url` must be specified")
        return self


class FilePathMapping(StrictModel):
    """A local file or directory uploaded to `path` in the container."""

    json_shorthands = ("string",)

    local_path: str
    path: str

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parts = _split_drive(value.split(":"))
        if len(parts) > 2:
            raise ValueError(f"invalid file path mapping {excerpt(value)}: use `<local>[:<path>]`")
        return {"local_path": parts[0], "path": parts[-1]}

    @field_validator("path")
    @classmethod
    def _unix_path(cls, value: str) -> str:
        if PureWindowsPath(value).is_absolute():
            raise ValueError(f"path must be a Unix file path: {value}")
        return value


class RegistryAuth(StrictModel):
    """Credentials for pulling a private image (values may use `${{ secrets.X }}`)."""

    username: str
    password: str


def check_unix_user(value: str | None) -> str | None:
    """`user[:group]`, names or non-negative ids."""
    if value is None:
        return None
    parts = value.split(":")
    if len(parts) > 2:
        raise ValueError(f"invalid user {excerpt(value)}: use `user[:group]`")
    for part, what in zip(parts, ("user name or id", "group name or id"), strict=False):
        if not part:
            raise ValueError(f"invalid user {excerpt(value)}: empty {what}")
        if part.lstrip("-").isdigit() and int(part) < 0:
            raise ValueError(f"invalid user {excerpt(value)}: negative id")
    return value
