"""The one `Settings` object of the server, built once and passed down.

Every field can come from a `dockyard server` flag or a `DOCKYARD_*` environment
variable (flags win). `Settings.from_env(environ, **overrides)` reads the environment
given to it (never `os.environ` implicitly) so tests build settings without patching.
The webhook secret is a `SecretStr`: it never shows up in a repr, a log line or an error.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
)

from agent.httpheads import DEFAULT_MAX_HEADER_BYTES
from agent.remote_scripts import check_image_name, check_job_user
from agent.remote_scripts import check_volume_roots as check_remote_volume_roots
from agent.server.mounts import parse_roots
from reconciler.core.jobusers import JobUserRule
from reconciler.errors import UsageError
from reconciler.quantities import parse_duration, parse_size
from schemas.limits import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, MAX_CONFIG_VALUES, ConfigLimits

Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]
ImageName = Annotated[str, AfterValidator(check_image_name)]
"""An image reference, bounded and of a strict pattern (it lands in a remote shell command)."""
JobUser = Annotated[str, AfterValidator(check_job_user)]


def check_attach_host(value: str) -> str:
    """An address other machines reach this server's attach listeners at: an IP address
    (the listeners bind it and dstack's clients are given it), not 0.0.0.0 or ::."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"expected an IP address of this server, got {value!r}") from None
    if address.is_unspecified:
        raise ValueError("name the one address clients reach (0.0.0.0 and :: are not one)")
    return str(address)


AttachHost = Annotated[str, AfterValidator(check_attach_host)]


def check_volume_roots(value: str) -> str:
    """`local_volume_roots`: ':'-separated absolute paths (the local agent's --volume-root)."""
    parse_roots(value)
    return value


VolumeRoots = Annotated[str, AfterValidator(check_volume_roots)]
# `ssh_volume_roots`: the same, of plain characters only (it lands in a remote shell command)
SSHVolumeRoots = Annotated[str, AfterValidator(check_remote_volume_roots)]


def check_job_users(value: str) -> str:
    """`local_allow_job_users`: ','-separated account names (the local agent's
    --allow-job-user, each a flag value of its command line)."""
    for name in value.split(","):
        if name.strip() in ("auto", "self") or not name.strip():
            raise ValueError(f"{name.strip()!r} is not an account name")
        check_job_user(name.strip())
    return value


JobUsers = Annotated[str, AfterValidator(check_job_users)]


def check_work_root(value: str) -> str:
    """`local_work_root`: an absolute dir other than `/` (the local agent's --work-root,
    one flag value of its command line)."""
    path = Path(value)
    if not path.is_absolute() or "\0" in value or ".." in path.parts:
        raise ValueError(f"expected an absolute path without '..', got {value!r}")
    if path == Path("/"):
        raise ValueError("name a dir of its own for the jobs' working dirs, not /")
    return str(path)


WorkRoot = Annotated[str, AfterValidator(check_work_root)]


def check_attach_ports(value: str) -> str:
    """`START-END`: the ports the attach listeners may take (1024 < START <= END <= 65535)."""
    start, sep, end = value.partition("-")
    if not (sep and start.isdigit() and end.isdigit() and 1024 < int(start) <= int(end) < 65536):
        raise ValueError(f"expected START-END, ports 1025-65535, START <= END; got {value!r}")
    return f"{int(start)}-{int(end)}"


AttachPorts = Annotated[str, AfterValidator(check_attach_ports)]

MAX_WEBHOOK_BYTES = 25 * 1024 * 1024

_ENV_FIELDS: dict[str, str] = {
    "DOCKYARD_REPO": "repo",
    "DOCKYARD_BRANCH": "branch",
    "DOCKYARD_PATH": "path",
    "DOCKYARD_DB": "db",
    "DOCKYARD_DATA_DIR": "data_dir",
    "DOCKYARD_HOST": "host",
    "DOCKYARD_PORT": "port",
    "DOCKYARD_WEBHOOK_SECRET": "webhook_secret",
    "DOCKYARD_PROJECT": "project",
    "DOCKYARD_CONFIG": "cli_config",
    "DOCKYARD_BACKENDS_CONFIG": "backends_config",
    "DOCKYARD_SOURCES_CONFIG": "sources_config",
    "DOCKYARD_FETCH_INTERVAL": "fetch_interval",
    "DOCKYARD_GITHUB_TOKEN": "github_token",
    "DOCKYARD_GITHUB_API_URL": "github_api_url",
    "DOCKYARD_GITHUB_REPO": "github_repo",
    "DOCKYARD_GITLAB_TOKEN": "gitlab_token",
    "DOCKYARD_GITLAB_API_URL": "gitlab_api_url",
    "DOCKYARD_EXTERNAL_URL": "external_url",
    "DOCKYARD_PULUMI_PASSPHRASE": "pulumi_passphrase",
    "DOCKYARD_PULUMI_BACKEND": "pulumi_backend",
    "DOCKYARD_GCP_PROJECT": "gcp_project",
    "DOCKYARD_FORWARDED_ALLOW_IPS": "forwarded_allow_ips",
    "DOCKYARD_ATTACH_HOST": "attach_host",
    "DOCKYARD_ATTACH_PORTS": "attach_ports",
    "DOCKYARD_KEY_DIRS": "key_dirs",
    "DOCKYARD_LOCAL_JOB_USER": "local_job_user",
    "DOCKYARD_LOCAL_JOB_ISOLATION": "local_job_isolation",
    "DOCKYARD_LOCAL_DEFAULT_IMAGE": "local_default_image",
    "DOCKYARD_LOCAL_VOLUME_ROOTS": "local_volume_roots",
    "DOCKYARD_LOCAL_UNSANDBOXED_PROCESS_JOBS": "local_unsandboxed_process_jobs",
    "DOCKYARD_LOCAL_ALLOW_JOB_USERS": "local_allow_job_users",
}

LIMIT_FIELDS: tuple[str, ...] = (
    "config_max_bytes",
    "config_max_values",
    "config_max_depth",
    "max_header_bytes",
    "max_webhook_bytes",
    "upload_max_bytes",
    "upload_quota_bytes",
    "project_upload_quota_bytes",
    "archive_max_extracted_bytes",
    "archive_max_files",
)
"""Input bounds (docs/security.md, "Limits"): each is a `dockyard server` flag and
`DOCKYARD_<NAME>`, a whole number of bytes or items."""
_ENV_FIELDS.update({f"DOCKYARD_{name.upper()}": name for name in LIMIT_FIELDS})

OPERATIONS_FIELDS: tuple[str, ...] = (
    "job_log_head",
    "job_log_tail",
    "job_log_retention",
    "events_max_age",
    "events_max_count",
    "reconciles_max_age",
    "reconciles_max_count",
    "runs_max_age",
    "runs_max_count",
    "deliveries_max_age",
    "deliveries_max_count",
    "archives_max_age",
    "archives_max_count",
    "retention_interval",
    "retention_batch",
    "min_free_disk",
)
"""Day-two settings (docs/operations.md): each is a `dockyard server` flag and
`DOCKYARD_<NAME>`; durations take `7d`/`12h`/`90s`, sizes `10MiB`/`1GB`."""
_ENV_FIELDS.update({f"DOCKYARD_{name.upper()}": name for name in OPERATIONS_FIELDS})

SSH_AGENT_FIELDS: tuple[str, ...] = (
    "ssh_job_isolation",
    "ssh_default_image",
    "ssh_job_user",
    "ssh_allow_root_jobs",
    "ssh_min_free_disk",
    "ssh_volume_roots",
    "ssh_unsandboxed_process_jobs",
    "ssh_allow_job_users",
    "ssh_agent_dir",
    "ssh_agent_port",
)
"""The agents the server deploys to SSH fleet hosts (docs/fleets.md): each is a `dockyard
server` flag and `DOCKYARD_<NAME>`; the job options are passed on the agent's command line
and a host whose agent was started with other values gets it replaced (its jobs are
re-adopted); `ssh_agent_dir`/`ssh_agent_port` say where it is installed and listens."""
_ENV_FIELDS.update({f"DOCKYARD_{name.upper()}": name for name in SSH_AGENT_FIELDS})


LOCAL_AGENT_FIELDS: tuple[str, ...] = (
    "local_job_isolation",
    "local_default_image",
    "local_job_user",
    "local_min_free_disk",
    "local_work_root",
    "local_volume_roots",
    "local_unsandboxed_process_jobs",
    "local_allow_job_users",
)
"""The local fleet's agent (docs/server.md): each is a `dockyard server` flag and
`DOCKYARD_<NAME>`, passed on the agent's command line when the server starts it (an agent
started with other values is replaced; its jobs are re-adopted)."""
_ENV_FIELDS.update({f"DOCKYARD_{name.upper()}": name for name in LOCAL_AGENT_FIELDS})


def default_data_dir() -> Path:
    return Path.home() / ".dockyard" / "data"


def default_cli_config() -> Path:
    return Path.home() / ".dockyard" / "config.yml"


class Settings(BaseModel):
    """How the server runs: which repo it watches, where it keeps state, where it listens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: str | None = Field(default=None, description="config repo: a path or a Git URL")
    branch: str = Field(default="main", description="the branch that is the desired state")
    path: str = Field(default="", description="subdirectory of the repo holding the configs")
    db: str | None = Field(default=None, description="SQLAlchemy URL; SQLite in the data dir")
    data_dir: Path = Field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = Field(default=3000, ge=0, le=65535)
    webhook_secret: SecretStr | None = None
    project: str = Field(default="main", description="project the webhooks reconcile")
    cli_config: Path = Field(default_factory=default_cli_config)
    # the clusters (Slurm, Kubernetes) projects may use: reconciler.adapters.backendsfile
    backends_config: Path | None = Field(
        default=None, description="backends file; default <data-dir>/backends.yml"
    )
    dstack_server_config: Path | None = Field(
        default=None, description="dstack's server config.yml, read when no backends file is"
    )
    # the config repos the server follows beside --repo: reconciler.adapters.sourcesfile
    sources_config: Path | None = Field(default=None, description="sources file (docs/sources.md)")
    fetch_interval: float = Field(default=60.0, gt=0)
    max_webhook_bytes: int = Field(
        default=MAX_WEBHOOK_BYTES, gt=0, description="bytes of one webhook delivery"
    )
    # pull requests (reconciler.pr, docs/pull-requests.md): with a GitHub token the server
    # plans PRs on `pull_request` webhooks and sets `dockyard/apply` on pushed commits
    github_token: SecretStr | None = None
    github_api_url: str = Field(default="https://api.github.com", description="GitHub's API")
    github_repo: str | None = Field(default=None, description="OWNER/NAME for apply statuses")
    # with a GitLab token, `/dockyard approve` notes on merge requests (the GitLab webhook's
    # Note Hook) are checked and answered (docs/policies.md)
    gitlab_token: SecretStr | None = None
    gitlab_api_url: str = Field(default="https://gitlab.com/api/v4", description="GitLab's API")
    external_url: str | None = Field(default=None, description="the server's URL for links")
    pulumi_passphrase: SecretStr | None = Field(
        default=None, description="encrypts cloud stacks' state; unset: cloud resources blocked"
    )
    pulumi_backend: str | None = Field(
        default=None, description="Pulumi state backend URL; default file://<data-dir>/pulumi/state"
    )
    gcp_project: str | None = Field(default=None, description="GCP project of gcp fleets")
    # trust (docs/security.md): whose X-Forwarded-For is believed, where key files may be
    forwarded_allow_ips: str | None = Field(
        default=None, description="proxies trusted to set X-Forwarded-For (comma-separated)"
    )
    key_dirs: str | None = Field(
        default=None, description="dirs a fleet's identity_file may be in (':'-separated)"
    )
    attach_host: AttachHost | None = Field(
        default=None,
        description="the address of this server dstack clients on other machines attach to "
        "(the session listeners bind it); unset: 127.0.0.1 only",
    )
    attach_ports: AttachPorts | None = Field(
        default=None,
        max_length=11,
        description="START-END: the ports those listeners take (one per SSH host, one for "
        "the local agent; a firewall opens these); unset: free ports",
    )
    local_job_user: str = Field(
        default="auto",
        description="the local fleet's job account: auto (dockyard-job when root), self, NAME",
    )
    local_job_isolation: Literal["auto", "container", "process"] = Field(
        default="auto",
        description="the local fleet's jobs without an image: auto (a container of the "
        "default image when Docker has it), container, process",
    )
    local_default_image: ImageName | None = Field(
        default=None, description="the local fleet's image for jobs without one (dstack's)"
    )
    local_volume_roots: VolumeRoots | None = Field(
        default=None,
        description="the host dirs (':'-separated) below which the local fleet's instance "
        "volumes must lie; unset: /mnt:/data:/srv:/scratch (and the local volumes' dir)",
    )
    local_unsandboxed_process_jobs: bool = Field(
        default=False,
        description="a root server without bubblewrap runs the local fleet's process jobs "
        "anyway, unsandboxed, all as one account (off: they are refused, naming the package)",
    )
    local_allow_job_users: JobUsers | None = Field(
        default=None,
        description="the accounts (','-separated) a local process job's `user:` may name; "
        "unset: none (jobs run as their own identity)",
    )
    local_min_free_disk: Size = Field(
        default=2**30,
        ge=0,
        description="below this free space in the local agent's data dir (or Docker's root), "
        "new local jobs wait",
    )
    local_work_root: WorkRoot | None = Field(
        default=None,
        description="the dir of the local agent's working dirs of jobs run by another "
        "account; unset: /var/lib/dockyard-jobs/<agent>",
    )
    # the agents deployed to SSH fleet hosts; SSH_AGENT_FIELDS makes them flags
    ssh_job_isolation: Literal["auto", "container", "process"] = Field(
        default="auto",
        description="SSH hosts' jobs without an image: auto (a container of the default "
        "image when Docker has it), container, process",
    )
    ssh_default_image: ImageName | None = Field(
        default=None, description="SSH hosts' image for jobs without one"
    )
    ssh_job_user: JobUser = Field(
        default="auto",
        description="SSH hosts' job account: auto (dockyard-job when the login user is "
        "root), self, NAME",
    )
    ssh_allow_root_jobs: bool = Field(
        default=False, description="SSH hosts honour a process job's `user: root`"
    )
    ssh_min_free_disk: Size = Field(
        default=2**30, ge=0, description="below this free space on an SSH host, new jobs wait"
    )
    ssh_volume_roots: SSHVolumeRoots | None = Field(
        default=None,
        description="the host dirs (':'-separated) below which SSH hosts' instance volumes "
        "must lie",
    )
    ssh_unsandboxed_process_jobs: bool = Field(
        default=False,
        description="SSH hosts logged into as root without bubblewrap run process jobs anyway, "
        "unsandboxed, all as one account (off: they are refused, naming the package)",
    )
    ssh_allow_job_users: JobUsers | None = Field(
        default=None,
        description="the accounts (','-separated) an SSH host's process job's `user:` may "
        "name; unset: none (jobs run as their own identity)",
    )
    ssh_agent_dir: str = Field(
        default=".dockyard/agent",
        min_length=1,
        max_length=512,
        pattern=r"^[^\s\-][^\x00-\x1f]*$",  # shell-quoted where used; no option, no control
        description="SSH hosts' agent directory, relative to the login user's home",
    )
    ssh_agent_port: int = Field(
        default=10998,
        ge=1025,
        le=65535,
        description="SSH hosts' agent port on 127.0.0.1 (its SSH server for users: one below)",
    )
    # input bounds (docs/security.md, "Limits"); LIMIT_FIELDS makes them flags
    config_max_bytes: int = Field(
        default=MAX_CONFIG_BYTES, gt=0, description="bytes of one configuration file"
    )
    config_max_values: int = Field(
        default=MAX_CONFIG_VALUES, gt=0, description="values of one configuration, aliases expanded"
    )
    config_max_depth: int = Field(
        default=MAX_CONFIG_DEPTH, gt=0, description="nesting levels of one configuration"
    )
    max_header_bytes: int = Field(
        default=DEFAULT_MAX_HEADER_BYTES, ge=1024, description="bytes of a request's head"
    )
    upload_max_bytes: int = Field(
        default=24 * 2**20, gt=0, le=24 * 2**20, description="bytes of one uploaded archive"
    )
    upload_quota_bytes: int = Field(
        default=512 * 2**20, ge=0, description="bytes of uploaded archives kept per user"
    )
    project_upload_quota_bytes: int = Field(
        default=2 * 2**30, ge=0, description="bytes of uploaded archives a project's runs name"
    )
    archive_max_extracted_bytes: int = Field(
        default=2**30, gt=0, description="bytes one uploaded archive extracts to"
    )
    archive_max_files: int = Field(
        default=100_000, gt=0, description="members of one uploaded archive"
    )
    # retention and disk (docs/operations.md); OPERATIONS_FIELDS makes them flags
    job_log_head: Size = Field(
        default=2 * 2**20, ge=0, description="bytes kept from the start of each job's log"
    )
    job_log_tail: Size = Field(
        default=8 * 2**20, ge=4096, description="bytes kept from the end of each job's log"
    )
    job_log_retention: Duration = Field(
        default=14 * 86400.0, gt=0, description="a job's log is deleted this long after it ends"
    )
    events_max_age: Duration = Field(default=30 * 86400.0, gt=0, description="events kept")
    events_max_count: int = Field(default=100_000, ge=1, description="newest events kept")
    reconciles_max_age: Duration = Field(
        default=30 * 86400.0, gt=0, description="reconciles (plans, outcomes) kept"
    )
    reconciles_max_count: int = Field(
        default=1000, ge=1, description="newest reconciles kept per project"
    )
    runs_max_age: Duration = Field(
        default=30 * 86400.0, gt=0, description="finished runs (and their jobs) kept after they end"
    )
    runs_max_count: int = Field(
        default=10_000, ge=1, description="newest finished runs kept per project"
    )
    deliveries_max_age: Duration = Field(
        default=14 * 86400.0, gt=0, description="webhook deliveries kept"
    )
    deliveries_max_count: int = Field(
        default=10_000, ge=1, description="newest webhook deliveries kept"
    )
    archives_max_age: Duration = Field(
        default=7 * 86400.0, gt=0, description="uploaded archives no active run names kept"
    )
    archives_max_count: int = Field(default=1000, ge=1, description="newest uploaded archives kept")
    retention_interval: Duration = Field(
        default=600.0, gt=0, description="how often the retention sweep runs"
    )
    retention_batch: int = Field(
        default=500, ge=1, le=10_000, description="rows deleted per sweep transaction"
    )
    min_free_disk: Size = Field(
        default=2**30, ge=0, description="below this free space in the data dir, logs stop"
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> Settings:
        """Settings from `DOCKYARD_*` variables, then `overrides` (flags; None = unset)."""
        values: dict[str, Any] = {}
        for var, field in _ENV_FIELDS.items():
            raw = environ.get(var)
            if raw not in (None, ""):
                values[field] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise UsageError(f"invalid server setting {where}: {first['msg']}") from None

    @property
    def config_limits(self) -> ConfigLimits:
        """What `parse_config` may read of one file (the server's reconcile and API)."""
        return ConfigLimits(self.config_max_bytes, self.config_max_values, self.config_max_depth)

    def job_user_rule(self) -> JobUserRule:
        """What every server plan lets a process job's `user:` name (`core.jobusers`): an
        account listed for the local fleet or for the SSH hosts' agents (each agent holds
        its own list again at submit); root only with `ssh_allow_root_jobs` (the local agent
        never runs one); nothing to judge when every host runs image-less jobs in containers."""
        names = f"{self.local_allow_job_users or ''},{self.ssh_allow_job_users or ''}"
        return JobUserRule(
            allowed=frozenset(n.strip() for n in names.split(",") if n.strip()),
            allow_root=self.ssh_allow_root_jobs,
            process_jobs=(self.local_job_isolation, self.ssh_job_isolation)
            != ("container", "container"),
            settings="DOCKYARD_LOCAL_ALLOW_JOB_USERS for the local fleet, "
            "--ssh-allow-job-users for SSH fleets",
        )

    @property
    def public_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    @property
    def attach_port_range(self) -> range | None:
        """`attach_ports` as a range (None: any free port)."""
        if self.attach_ports is None:
            return None
        start, end = self.attach_ports.split("-")
        return range(int(start), int(end) + 1)

    @property
    def allowed_key_dirs(self) -> tuple[Path, ...]:
        """Where fleets' key files may be: `key_dirs`, else the data dir and ~/.ssh."""
        if self.key_dirs:
            return tuple(Path(part).expanduser() for part in self.key_dirs.split(":") if part)
        return (self.data_dir, Path.home() / ".ssh")

    @property
    def admin_token_path(self) -> Path:
        return self.data_dir / "admin-token"
