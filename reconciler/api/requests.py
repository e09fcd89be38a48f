"""Request bodies of the REST API (POST + JSON, as dstack's): strict, so typos are 422s.

The server validates them; the `Client` builds them, so both sides agree by construction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[a-z][a-z0-9-]{1,40}$"
SECRET_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Empty(Body):
    pass


class ListRequest(Body):
    limit: int = Field(default=100, ge=1, le=1000)


class NameRequest(Body):
    name: str = Field(min_length=1, max_length=200)


class NamesRequest(Body):
    names: list[str] = Field(min_length=1, max_length=100)


class CreateUserRequest(Body):
    username: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$")
    global_role: str = Field(default="user", pattern=r"^(admin|user)$")


class UsernameRequest(Body):
    username: str = Field(min_length=1, max_length=100)


class CreateProjectRequest(Body):
    project_name: str = Field(pattern=NAME_PATTERN)


class MemberSetting(Body):
    username: str = Field(min_length=1, max_length=100)
    project_role: str = Field(pattern=r"^(admin|manager|user)$")


class MembersRequest(Body):
    members: list[MemberSetting] = Field(max_length=1000)


class RemoveMembersRequest(Body):
    usernames: list[str] = Field(min_length=1, max_length=1000)


class FileArchiveRef(Body):
    """An uploaded archive (`/api/files/upload_archive`) and where it lands in the job."""

    id: str = Field(pattern=r"^[0-9a-f]{64}$")
    path: str = Field(min_length=1, max_length=1000)


class ArchiveByHashRequest(Body):
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")


class ConfigurationRequest(Body):
    """One configuration posted by the CLI: its YAML text (or a parsed dict) and its path,
    and the archives of its local `repos`/`files` the CLI uploaded."""

    text: str | None = Field(default=None, max_length=1_000_000)
    configuration: dict[str, Any] | None = None
    path: str = Field(default=".dstack.yml", max_length=1000)
    file_archives: list[FileArchiveRef] = Field(default_factory=list, max_length=100)


class ApplyRequest(ConfigurationRequest):
    force: bool = False


class RunsListRequest(Body):
    all: bool = False
    limit: int = Field(default=100, ge=1, le=1000)


class GlobalRunsListRequest(Body):
    """dstack's `/api/runs/list` body: filters and the `prev_*` cursor of the last page."""

    project_name: str | None = None
    repo_id: str | None = None  # accepted for dstack's clients; runs here have no repo id
    username: str | None = None
    only_active: bool = False
    prev_submitted_at: datetime | None = None
    prev_run_id: str | None = None
    limit: int = Field(default=100, ge=1, le=100)
    ascending: bool = False


class RunGetRequest(Body):
    run_name: str = Field(min_length=1, max_length=200)


class StopRunsRequest(Body):
    runs_names: list[str] = Field(min_length=1, max_length=100)
    abort: bool = False


class DeleteRunsRequest(Body):
    runs_names: list[str] = Field(min_length=1, max_length=100)


class LogsRequest(Body):
    run_name: str = Field(min_length=1, max_length=200)
    replica_num: int = Field(default=0, ge=0, le=10_000)
    job_num: int = Field(default=0, ge=0, le=10_000)
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=1024 * 1024, ge=1, le=16 * 1024 * 1024)


class EventsRequest(Body):
    limit: int = Field(default=100, ge=1, le=1000)
    since: datetime | None = None
    target_type: str | None = Field(default=None, max_length=32)
    target_name: str | None = Field(default=None, max_length=200)


class ReconcileGetRequest(Body):
    id: str = Field(min_length=1, max_length=64)


class SecretSetRequest(Body):
    name: str = Field(pattern=SECRET_NAME_PATTERN)
    value: str = Field(max_length=64 * 1024)


class SecretNameRequest(Body):
    name: str = Field(pattern=SECRET_NAME_PATTERN)


class OffersRequest(Body):
    gpu: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=50, ge=1, le=1000)
