"""The wire models of the REST API: what the server answers and the `Client` returns.

Shapes follow dstack's where dstack 0.22.5's server API has them: `Run` is dstack's Run
JSON (`id`, `project_name`, `user`, `status`, `run_spec`, `jobs[].job_submissions[]`,
`latest_job_submission`, `service {url, model {name, base_url, type}}`, …). Answers accept
unknown fields, so an older client keeps working against a newer server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class Wire(BaseModel):
    """Base of every answer: tolerant of fields it does not know."""

    model_config = ConfigDict(extra="allow")


class ServerInfo(Wire):
    """The server's version; what it reconciles is shown to global admins only."""

    server_version: str
    project: str | None = None
    repo: str | None = None
    branch: str | None = None


class User(Wire):
    """A user; `active` and `permissions` are dstack's (every user may create projects)."""

    id: str
    username: str
    global_role: str
    created_at: datetime
    email: str | None = None
    active: bool = True
    permissions: dict[str, bool] = {"can_create_projects": True}


class UserWithToken(User):
    """A user with a plain token: ours as `{user, token}`, dstack's `UserWithCreds` as the
    user's own fields with `creds {token}`."""

    user: User
    token: str
    creds: dict[str, str] = {}
    ssh_public_key: str | None = None  # the caller's own pair only (users/get_my_user)
    ssh_private_key: str | None = None


def with_token(user: User, token: str) -> UserWithToken:
    return UserWithToken(**user.model_dump(), user=user, token=token, creds={"token": token})


def member_permissions(project_role: str) -> dict[str, bool]:
    """dstack's member permissions: what a role may do beyond running things."""
    manages = project_role in ("admin", "manager")
    return {"can_manage_ssh_fleets": manages, "can_manage_secrets": manages}


class Member(Wire):
    user: User
    project_role: str
    permissions: dict[str, bool] = {}


class Project(Wire):
    """A project; `owner` (its first admin) and `backends` (none configured: capacity comes
    from fleets) are dstack's."""

    project_id: str
    project_name: str
    created_at: datetime
    owner: User | None = None
    backends: list[dict[str, Any]] = []
    is_public: bool = False
    members: list[Member]


class ServiceModel(Wire):
    name: str
    base_url: str
    type: str = "chat"


class ServiceInfo(Wire):
    url: str
    model: ServiceModel | None = None
    options: dict[str, Any] = {}


class JobSubmission(Wire):
    id: str
    submission_num: int
    deployment_num: int
    submitted_at: datetime
    last_processed_at: datetime | None
    finished_at: datetime | None = None
    status: str
    status_message: str
    termination_reason: str | None
    exit_status: int | None
    job_provisioning_data: dict[str, Any] | None = None
    job_runtime_data: dict[str, Any] | None = None


class JobInfo(Wire):
    job_spec: dict[str, Any]
    job_submissions: list[JobSubmission]


class Run(Wire):
    """dstack's Run JSON (what `dockyard run get NAME --json` prints)."""

    id: str
    project_name: str
    user: str
    fleet: dict[str, Any] | None = None
    submitted_at: datetime
    last_processed_at: datetime | None
    status: str
    status_message: str
    termination_reason: str | None
    run_spec: dict[str, Any]
    jobs: list[JobInfo]
    latest_job_submission: JobSubmission | None
    cost: float = 0.0
    service: ServiceInfo | None = None
    deployment_num: int = 0
    error: str | None = None
    deleted: bool = False
    next_triggered_at: datetime | None = None
    origin: str | None = None


class Instance(Wire):
    """dstack's `Instance`: `backend` is dstack's (`remote` for this host and SSH hosts;
    ours is `dockyard_backend`), `instance_type` its `{name, resources}`."""

    id: str
    project_name: str | None = None
    name: str
    fleet_id: str | None = None
    fleet_name: str | None = None
    instance_num: int
    status: str
    created: datetime | None = None
    hostname: str | None
    backend: str | None
    dockyard_backend: str | None = None
    region: str | None
    instance_type: dict[str, Any] | str | None
    price: float | None
    resources: dict[str, Any] | None
    busy_blocks: int = 0
    total_blocks: int = 1
    unreachable: bool = False


class Fleet(Wire):
    id: str
    name: str
    project_name: str
    spec: dict[str, Any]
    status: str
    status_message: str
    created_at: datetime
    instances: list[Instance]


class Volume(Wire):
    """A volume or a gateway: its configuration, status and the outputs of its stack."""

    id: str
    name: str
    project_name: str
    configuration: dict[str, Any]
    status: str
    dockyard_status: str | None = None
    status_message: str
    outputs: dict[str, Any] | None = None
    created_at: datetime | None = None


class EventTarget(Wire):
    type: str
    project_name: str | None
    id: str | None
    name: str


class Event(Wire):
    id: str
    message: str
    timestamp: datetime
    targets: list[EventTarget]


class Reconcile(Wire):
    id: str
    project_name: str
    trigger: str
    delivery_id: str | None
    attempted_revision: str | None
    applied_revision: str | None
    status: str
    stage: str | None
    plan: Any = None
    outcome: Any = None
    error: str | None
    stage_timings: Any = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None

    def is_finished(self) -> bool:
        return self.status in ("succeeded", "failed", "aborted")


class Delivery(Wire):
    id: str
    provider: str
    delivery_id: str
    event: str
    ref: str | None
    status_code: int | None
    outcome: str | None
    reason: str | None
    received_at: datetime


class Secret(Wire):
    """A project secret; `value` is set only in answers to admins who ask for one secret."""

    id: str
    name: str
    value: str | None = None


class LogChunk(Wire):
    """Bytes `[offset, next_offset)` of a job's log, base64 in `data`.

    When the server's log cap dropped bytes in that range, `dropped_bytes` says how many and
    `data` carries a one-line notice where they were (docs/operations.md)."""

    job_id: str | None
    offset: int
    next_offset: int
    data: str
    finished: bool
    dropped_bytes: int = 0


class LogEvent(Wire):
    timestamp: datetime
    log_source: str
    message: str


class JobSubmissionLogs(Wire):
    """dstack's answer to `logs/poll`: base64 messages and the token of the next page."""

    logs: list[LogEvent]
    next_token: str | None = None


class WebhookAnswer(Wire):
    outcome: str
    reason: str | None = None
    reconcile_id: str | None = None
