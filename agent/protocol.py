"""The agent's HTTP API as pydantic models: the one contract between server and host agent.

The agent (``agent/server``) serves these models as JSON on 127.0.0.1 only; the server
reaches it through an SSH tunnel with ``AgentClient`` (``agent/client.py``) and parses
the answers with the same models. ``docs/contracts.md`` ("Agent API") lists the routes.

Requests are strict (``extra="forbid"``: a typo is an error). Answers ignore unknown
fields, so an older client can read a newer agent within one ``API_VERSION``; the
client compares ``Healthcheck.api_version`` and re-deploys the agent on a mismatch.

Job lifecycle (``JobStatus``)::

    pending -> pulling -> running -> exited       (the commands ended; see exit_status)
       |          |          \\----> terminated   (stopped on request; reason stopped|killed)
       \\---------+-----------------> failed       (the agent could not run it; see reason)

``exited`` covers every exit code: ``exit_status == 0`` is success, anything else is a
failure of the user's commands, which the server maps to its own statuses.
"""

from __future__ import annotations

import enum
import hashlib
from importlib import metadata
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

API_VERSION = 1
API_PREFIX = "/api/v1"
SERVICE_NAME = "dockyard-agent"

HEADER_LOG_OFFSET = "X-Log-Offset"
HEADER_NEXT_OFFSET = "X-Next-Offset"
HEADER_JOB_FINISHED = "X-Job-Finished"
DEFAULT_LOG_LIMIT = 1024 * 1024
MAX_LOG_LIMIT = 16 * 1024 * 1024

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
MAX_ARCHIVES_BYTES = 32 * 1024 * 1024  # base64 text of all the archives of one job


def agent_version() -> str:
    """The installed dockyard version: the agent and the server compare it."""
    try:
        return metadata.version("dockyard")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def agent_build() -> str:
    """A fingerprint of the agent's code as installed (every `.py` of the package).

    The server replaces a running local agent whose build differs from its own even when
    the version string is the same (a checkout that moved, an editable install)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ExecutorKind(enum.StrEnum):
    PROCESS = "process"
    DOCKER = "docker"


class NetworkMode(enum.StrEnum):
    HOST = "host"
    BRIDGE = "bridge"


class GpuVendor(enum.StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"


class JobStatus(enum.StrEnum):
    PENDING = "pending"
    PULLING = "pulling"
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"
    TERMINATED = "terminated"

    def is_finished(self) -> bool:
        return self in (JobStatus.EXITED, JobStatus.FAILED, JobStatus.TERMINATED)


class JobReason(enum.StrEnum):
    """Why a job is ``failed`` or ``terminated`` (closed set)."""

    STOPPED = "stopped"  # terminated: ended within the grace period after a stop
    KILLED = "killed"  # terminated: forced (SIGKILL) after the grace period or force=true
    IMAGE_NOT_FOUND = "image_not_found"  # failed: image neither local nor pullable
    EXECUTOR_ERROR = "executor_error"  # failed: the process/container could not start
    LOST = "lost"  # failed: the job vanished without an exit status (host reboot, rm -f)


class ErrorCode(enum.StrEnum):
    NOT_FOUND = "not_found"
    NO_CAPACITY = "no_capacity"
    INVALID_REQUEST = "invalid_request"
    EXECUTOR_UNAVAILABLE = "executor_unavailable"
    JOB_ACTIVE = "job_active"
    FORBIDDEN = "forbidden"  # the caller's local user may not use this agent (server.peers)
    INTERNAL = "internal"


# --- answers -------------------------------------------------------------------------------


class ErrorBody(_Answer):
    """The body of every 4xx/5xx answer."""

    error: ErrorCode
    message: str


class Healthcheck(_Answer):
    service: str = SERVICE_NAME
    version: str
    api_version: int = API_VERSION
    build: str = ""  # `agent_build()`; empty from agents older than the field
    disk_problem: str = ""  # set while the disk is too full for new jobs (`agent.diskspace`)
    disk_free: dict[str, int] = {}  # free bytes of the data dir and Docker's root
    epoch: str = ""  # its job events' epoch: new at each start (the server sees a restart)


class PortHolder(_Answer):
    """``GET /ports/{port}/holder``: why a connection to that host port would not reach
    the running job that has it (another process holds it), or None."""

    problem: str | None = None


class GpuInfo(_Answer):
    vendor: GpuVendor
    name: str
    memory_mib: int
    index: int


class HostInfo(_Answer):
    hostname: str
    cpus: int
    arch: str  # "x86_64" | "aarch64" | … (uname -m)
    memory_mib: int
    disk_mib: int  # free space of the data dir's filesystem
    gpus: list[GpuInfo] = []
    executors: list[ExecutorKind] = []
    addresses: list[str] = []


class PortMapping(_Answer):
    container_port: int
    host_port: int


class JobState(_Answer):
    id: str
    status: JobStatus
    exit_status: int | None = None
    reason: JobReason | None = None
    message: str = ""
    pull_progress: float | None = None  # 0.0 to 1.0 while pulling, when the engine reports sizes
    ports: list[PortMapping] = []
    started_at: float | None = None  # unix seconds
    finished_at: float | None = None
    pid: int | None = None
    container_id: str | None = None
    # how the agent runs it: a job without an image may run in a container of the agent's
    # default image (`--job-isolation`); None from agents that predate the field
    executor: ExecutorKind | None = None
    notice: str = ""  # what the job's owner should know (e.g. why it is not in a container)
    # SSH activity, when this agent serves the users' SSH (its embedded server); else None
    connections: int | None = None  # open user connections (sessions, port forwards)
    last_connection_at: float | None = None  # when the last one closed (unix seconds)
    no_connections_secs: float | None = None  # 0 while connected; idle seconds otherwise


class GpuMetrics(_Answer):
    index: int
    utilization: float  # percent
    memory_used_mib: int


class JobMetrics(_Answer):
    timestamp: float  # unix seconds
    cpu_percent: float  # of one CPU: 200.0 = two CPUs busy
    memory_bytes: int
    gpus: list[GpuMetrics] = []


class LogChunk(_Answer):
    """One answer of ``GET /jobs/{id}/logs``, rebuilt from the raw body and its headers."""

    offset: int
    next_offset: int
    finished: bool
    data: bytes = b""


# --- requests ------------------------------------------------------------------------------


class PortRequest(_Request):
    container_port: Annotated[int, Field(ge=1, le=65535)]
    host_port: Annotated[int, Field(ge=1, le=65535)] | None = None  # None: any free port


class VolumeMount(_Request):
    host_path: str
    container_path: str
    read_only: bool = False
    optional: bool = False  # dstack's: skipped when it cannot attach here (`optionalvolumes`)


class Archive(_Request):
    """Files for the job: a tar.gz extracted into ``path`` before the job starts.

    ``path`` is absolute, or relative to the job's working dir (``.`` is the working dir).
    Members may not be absolute, climb out with ``..`` or link outside (``filter="data"``).
    """

    path: Annotated[str, Field(min_length=1)]
    data: str  # base64 of a tar.gz


class JobSpec(_Request):
    """Everything the agent needs to run one job; the server renders it from a run spec."""

    id: Annotated[str, Field(pattern=JOB_ID_PATTERN)]
    run_name: str
    executor: ExecutorKind = ExecutorKind.PROCESS
    image: str | None = None  # required for docker
    commands: list[str] = []
    entrypoint: list[str] | None = None  # docker: replaces the image entrypoint
    shell: str = "/bin/sh"
    env: dict[str, str] = {}
    working_dir: str | None = None  # process: default <data-dir>/jobs/<id>/work
    ports: list[PortRequest] = []
    volumes: list[VolumeMount] = []
    gpus: list[int] = []  # host GPU indices, allocated by the server's scheduler
    gpu_vendor: GpuVendor = GpuVendor.NVIDIA  # how `gpus` reach the job (devices, env)
    cpus: Annotated[float, Field(gt=0)] | None = None
    memory_mib: Annotated[int, Field(gt=0)] | None = None
    shm_size_mib: Annotated[int, Field(gt=0)] | None = None
    user: str | None = None
    privileged: bool = False
    network_mode: NetworkMode = NetworkMode.HOST
    stop_duration: Annotated[int, Field(ge=0)] = 10  # seconds of grace before SIGKILL
    labels: dict[str, str] = {}
    archives: list[Archive] = []  # at most MAX_ARCHIVES_BYTES of data in all
    # variables set to a path: absolute as given, relative ones under the working dir
    path_env: dict[str, str] = {}
    # count forwarded connections to the job's ports as users' activity (SSH sessions
    # always count): dev environments with inactivity_duration
    watch_connections: bool = False


class StopRequest(_Request):
    timeout: Annotated[float, Field(ge=0)] | None = None  # None: the job's stop_duration
    force: bool = False  # True: SIGKILL at once


SUBMISSIONS_PATH = "/jobs/submissions"
MAX_SUBMISSIONS = 100
"""Jobs one ``POST /jobs/submissions`` may carry."""


class SubmissionRequest(_Request):
    """``POST /jobs/submissions``: submit these jobs (``POST /jobs`` for many), each as
    ``POST /jobs`` would, in one call."""

    jobs: Annotated[list[JobSpec], Field(min_length=1, max_length=MAX_SUBMISSIONS)]


class Submitted(_Answer):
    """One job of ``POST /jobs/submissions``: its state, or why it was refused."""

    state: JobState | None = None
    error: ErrorBody | None = None
    http_status: int = 200  # what ``POST /jobs`` would have answered for it


class Submissions(_Answer):
    """What ``POST /jobs/submissions`` did, job by job in the request's order."""

    results: list[Submitted]


REMOVALS_PATH = "/jobs/removals"
MAX_REMOVALS = 1000
"""Jobs one ``POST /jobs/removals`` may name."""


class RemovalRequest(_Request):
    """``POST /jobs/removals``: remove these finished jobs (``DELETE /jobs/{id}`` for many)."""

    job_ids: Annotated[list[Annotated[str, Field(max_length=128)]], Field(max_length=MAX_REMOVALS)]


class Removals(_Answer):
    """What a ``POST /jobs/removals`` did: `removed` (also those it did not know: gone
    either way) and `active` (not finished: left, stop them first)."""

    removed: list[str] = []
    active: list[str] = []
