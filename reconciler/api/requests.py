"""Request bodies of the REST API (POST + JSON, as dstack's).

The server validates them; the `Client` builds them, so both sides agree by construction.
Fields we do not model are ignored (dstack's clients send more than we use, and a newer
client may send fields we do not know yet); the fields we do model are validated.
Where dstack's body names a thing differently (`id` beside `name`, `secrets_names`, the
logs' `job_submission_id` + `next_token`), both spellings are accepted.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[a-z][a-z0-9-]{1,40}$"
SECRET_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ListRequest(Body):
    limit: int = Field(default=100, ge=1, le=1000)


class NameRequest(Body):
    name: str = Field(min_length=1, max_length=200)


class NameOrIdRequest(Body):
    """dstack's `get` bodies: the resource's `name` or its `id`."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    id: str | None = Field(default=None, max_length=64)


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
    # dstack's bodies: `runs/get_plan {run_spec}`, `fleets|volumes/get_plan {spec}`, and
    # `…/apply {plan: {run_spec | spec, current_resource}}`.
    run_spec: dict[str, Any] | None = None
    spec: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None


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
    """The run's name, or (dstack's Python API) its `id`."""

    run_name: str | None = Field(default=None, min_length=1, max_length=200)
    id: str | None = Field(default=None, max_length=64)


class StopRunsRequest(Body):
    runs_names: list[str] = Field(min_length=1, max_length=100)
    abort: bool = False


class DeleteRunsRequest(Body):
    runs_names: list[str] = Field(min_length=1, max_length=100)


class LogsRequest(Body):
    """Ours: (replica, job) and a byte `offset`; dstack's: the `job_submission_id` and its
    opaque `next_token` (here: the byte offset), answered as dstack's `JobSubmissionLogs`."""

    run_name: str = Field(min_length=1, max_length=200)
    replica_num: int = Field(default=0, ge=0, le=10_000)
    job_num: int = Field(default=0, ge=0, le=10_000)
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=1024 * 1024, ge=0, le=16 * 1024 * 1024)
    job_submission_id: str | None = Field(default=None, max_length=64)
    next_token: str | None = Field(default=None, pattern=r"^[0-9]{1,18}$")
    start_time: datetime | None = None  # dstack's: a submission that ended before: no logs


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


class SecretsDeleteRequest(Body):
    """Ours: one `name`; dstack's: `secrets_names`."""

    name: str | None = Field(default=None, pattern=SECRET_NAME_PATTERN)
    secrets_names: list[Annotated[str, Field(pattern=SECRET_NAME_PATTERN)]] = Field(
        default_factory=list, max_length=100
    )

    def names(self) -> list[str]:
        return ([self.name] if self.name else []) + self.secrets_names


class OffersRequest(Body):
    gpu: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=50, ge=1, le=1000)


class InstancesListRequest(Body):
    """dstack's `/api/instances/list`: the projects to list (all of the caller's if none)."""

    project_names: list[str] | None = Field(default=None, max_length=100)
    limit: int = Field(default=1000, ge=1, le=1000)


class DeleteInstancesRequest(Body):
    """dstack's `fleets/delete_instances`: the fleet and the `instance_num`s to remove."""

    name: str = Field(min_length=1, max_length=200)
    instance_nums: list[int] = Field(min_length=1, max_length=1000)


class GlobalEventsRequest(Body):
    """dstack's `/api/events/list`: filters by ids (UUIDs), `prev_recorded_at` paging."""

    within_projects: list[str] | None = Field(default=None, max_length=100)
    target_projects: list[str] | None = Field(default=None, max_length=100)
    target_fleets: list[str] | None = Field(default=None, max_length=100)
    target_runs: list[str] | None = Field(default=None, max_length=100)
    target_volumes: list[str] | None = Field(default=None, max_length=100)
    target_gateways: list[str] | None = Field(default=None, max_length=100)
    prev_recorded_at: datetime | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    ascending: bool = False

    def target_ids(self) -> list[str] | None:
        lists = [
            self.target_fleets,
            self.target_runs,
            self.target_volumes,
            self.target_gateways,
        ]
        chosen = [i for ids in lists if ids for i in ids]
        return chosen or None
