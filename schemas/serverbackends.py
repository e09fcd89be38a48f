"""The server's backends file: which existing clusters (Slurm, Kubernetes) a project may use.

dstack's own shape (`~/.dstack/server/config.yml`): `projects: - name: … backends: - type:
slurm …` / `type: kubernetes …`. It lives on the server, never in the config repo, because
it names credentials (an SSH key, a kubeconfig) or the files that hold them. The server
reads it at start (`reconciler.adapters.backendsfile` does the I/O) and refuses to start on
a bad file, with `file:line:col: field: message` for every problem (`ConfigError`).

Backend types Dockyard does not serve from this file (aws, gcp, … as dstack configures
them here) are kept as their type alone, so dstack's own file can be pointed at unchanged.
Pure: text in, models out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationError, model_validator

from schemas.base import FieldConflict, StrictModel
from schemas.limits import DEFAULT_LIMITS, measure, size_problem
from schemas.loading import decode, load_document
from schemas.locating import locate_errors
from schemas.parsing import MAX_PROBLEMS
from schemas.problems import ConfigError, Problem
from schemas.scalars import ResourceName

SERVED_TYPES = ("slurm", "kubernetes")


class PrivateKey(StrictModel):
    """dstack's `private_key:`: a key file on the server (`path`) or the key itself."""

    path: str | None = None
    content: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> PrivateKey:
        if (self.path is None) == (self.content is None):
            raise ValueError("set exactly one of `path` (a key file) or `content` (the key)")
        return self


class ProxyJump(StrictModel):
    """An SSH jump host in front of the login node (or the pods)."""

    hostname: str
    port: int = Field(default=22, ge=1, le=65535)
    user: str | None = None
    private_key: PrivateKey | None = None


class GpuPartitions(StrictModel):
    """`gpu_partitions:` entry: the GPU model and the partitions that hold it."""

    gpu: str
    partitions: list[str] = Field(min_length=1)


class SlurmCluster(StrictModel):
    """One Slurm cluster (a dstack region), reached by SSH on its login node."""

    name: ResourceName
    hostname: str
    port: int = Field(default=22, ge=1, le=65535)
    user: str
    private_key: PrivateKey
    proxy_jump: ProxyJump | None = None
    gpu_partitions: list[GpuPartitions] = []
    cpu_partitions: list[str] = []
    price: float = Field(default=0.0, ge=0)
    """$/h per node of this cluster's offers (Dockyard's field; dstack has none: $0)."""


class SlurmBackend(StrictModel):
    type: Literal["slurm"] = "slurm"
    clusters: list[SlurmCluster] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> SlurmBackend:
        names = [c.name for c in self.clusters]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise FieldConflict(("clusters", index, "name"), f"cluster `{name}` twice")
        return self


class Kubeconfig(StrictModel):
    """dstack's `kubeconfig:`: a file on the server (`filename`) or its text (`data`)."""

    filename: str | None = None
    data: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Kubeconfig:
        if (self.filename is None) == (self.data is None):
            raise ValueError("set exactly one of `filename` (a kubeconfig file) or `data`")
        return self


class KubernetesBackend(StrictModel):
    type: Literal["kubernetes"] = "kubernetes"
    kubeconfig: Kubeconfig
    proxy_jump: ProxyJump | None = None


class OtherBackend(StrictModel):
    """A backend dstack configures here that Dockyard does not take from this file."""

    model_config = StrictModel.model_config | {"extra": "ignore"}
    type: str


def _backend_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in SERVED_TYPES else "other"


ServerBackend = Annotated[
    Annotated[SlurmBackend, Tag("slurm")]
    | Annotated[KubernetesBackend, Tag("kubernetes")]
    | Annotated[OtherBackend, Tag("other")],
    Discriminator(_backend_tag),
]


class ProjectBackends(StrictModel):
    name: ResourceName
    backends: list[ServerBackend] = []


class BackendsConfig(StrictModel):
    """The whole file. Unknown top-level keys of dstack's file (`encryption`, …) are
    ignored: they configure dstack's server, not capacity."""

    model_config = StrictModel.model_config | {"extra": "ignore"}
    projects: list[ProjectBackends] = []

    @model_validator(mode="after")
    def _unique(self) -> BackendsConfig:
        names = [p.name for p in self.projects]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise FieldConflict(("projects", index, "name"), f"project `{name}` twice")
        for index, entry in enumerate(self.projects):
            types = [b.type for b in entry.backends]
            for at, kind in enumerate(types):
                if kind in SERVED_TYPES and kind in types[:at]:
                    raise FieldConflict(
                        ("projects", index, "backends", at, "type"),
                        f"backend `{kind}` twice in project `{entry.name}`: "
                        "list all its clusters in one entry",
                    )
        return self

    def backends_of(self, project: str) -> tuple[SlurmBackend | KubernetesBackend, ...]:
        """The served backends (slurm, kubernetes) configured for `project`."""
        return tuple(
            backend
            for entry in self.projects
            if entry.name == project
            for backend in entry.backends
            if isinstance(backend, SlurmBackend | KubernetesBackend)
        )


def named_files(config: BackendsConfig) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(where in the file, the path) of every credential file the file names."""
    for p, entry in enumerate(config.projects):
        for b, backend in enumerate(entry.backends):
            at: tuple[str | int, ...] = ("projects", p, "backends", b)
            if isinstance(backend, KubernetesBackend):
                if backend.kubeconfig.filename is not None:
                    yield (*at, "kubeconfig", "filename"), backend.kubeconfig.filename
                jumps = [((*at, "proxy_jump"), backend.proxy_jump)]
            elif isinstance(backend, SlurmBackend):
                jumps = []
                for c, cluster in enumerate(backend.clusters):
                    where = (*at, "clusters", c)
                    if cluster.private_key.path is not None:
                        yield (*where, "private_key", "path"), cluster.private_key.path
                    jumps.append(((*where, "proxy_jump"), cluster.proxy_jump))
            else:
                continue
            for where, jump in jumps:
                if jump is not None and jump.private_key is not None and jump.private_key.path:
                    yield (*where, "private_key", "path"), jump.private_key.path


def parse_backends_config(
    text: str | bytes, path: str, readable: Callable[[str], str | None] | None = None
) -> BackendsConfig:
    """The backends file's models, or `ConfigError` naming every problem by line.

    `readable(path)`: None when a credential file the file names can be read, else why not
    (the caller's I/O; None here: not checked)."""
    size = len(text) if isinstance(text, bytes) else len(text.encode())
    source, problems = decode(text, path)
    bound = size_problem(size, path, DEFAULT_LIMITS) or measure(source, path, DEFAULT_LIMITS)
    if bound is not None or problems:
        raise ConfigError([bound] if bound is not None else problems)
    document = load_document(source, path)
    if document.problems:
        raise ConfigError(list(document.problems))
    data = {} if document.data is None else document.data
    if not isinstance(data, dict):
        raise ConfigError([Problem(path, 1, 1, "", "the backends file must be a mapping")])
    try:
        config = BackendsConfig.model_validate(data)
    except ValidationError as exc:
        errors = [_untagged(e) for e in exc.errors(include_url=False)[:MAX_PROBLEMS]]
        raise ConfigError(locate_errors(errors, document.node, BackendsConfig, path)) from None
    if readable is None:
        return config
    unreadable: list[Any] = []
    for loc, named in named_files(config):
        why = readable(named)
        if why is not None:
            msg = f"{named}: {why} (the server reads credentials from this file)"
            unreadable.append({"type": "value_error", "loc": loc, "msg": msg, "input": named})
    if unreadable:
        found = locate_errors(unreadable[:MAX_PROBLEMS], document.node, BackendsConfig, path)
        raise ConfigError(found)
    return config


def _untagged(error: Any) -> Any:
    """The error without the union tag pydantic puts after `backends[i]` (not a YAML key)."""
    loc = list(error["loc"])
    for at in range(2, len(loc)):
        if loc[at - 2] == "backends" and isinstance(loc[at - 1], int) and loc[at] in _TAGS:
            del loc[at]
            break
    return {**error, "loc": tuple(loc)}


_TAGS = (*SERVED_TYPES, "other")
