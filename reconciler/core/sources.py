"""What a source may say, checked before it is stored or followed (pure: no I/O).

`SourceSpec` is the one shape of a source, for the admin API's bodies and for each entry
of the `--sources-config` file (`parse_sources_file`: every problem as
`file:line:col: field: message`). `one_per_project` refuses two sources feeding one
project, naming both. `parse_ref` reads a secret's or a credential's reference
(`env:NAME` or `file:/absolute/path`): a source never holds a secret, only where the
server reads it, and only the reference is ever shown back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from reconciler.domain.sources import Source, SourceOrigin
from reconciler.errors import UsageError
from schemas.base import StrictModel
from schemas.loading import decode, load_document
from schemas.locating import locate_errors
from schemas.problems import ConfigError, Problem

NAME_PATTERN = r"^[a-z][a-z0-9-]{1,40}$"
REF_PATTERN = r"^(env:[A-Za-z_][A-Za-z0-9_]{0,99}|file:/[^\x00]{1,1000})$"
BRANCH_PATTERN = r"^[A-Za-z0-9_/][A-Za-z0-9._/-]{0,199}$"
MAX_SOURCES = 1000
MAX_FETCH_INTERVAL = 86400.0
MAX_PATHS = 64
MAX_PATH_LENGTH = 500
_PATH_SEGMENT = re.compile(r"^[^\x00-\x1f\x7f\\:*?\[\]]+$")


class SourceSpec(StrictModel):
    """A source as an admin writes it (API body, or an entry of the sources file)."""

    name: str = Field(pattern=NAME_PATTERN)
    repo: str = Field(min_length=1, max_length=1000)
    project: str = Field(pattern=NAME_PATTERN)
    branch: str = Field(default="main", pattern=BRANCH_PATTERN)
    paths: list[str] = Field(default_factory=list, max_length=MAX_PATHS)
    fetch_interval: float | None = Field(default=None, gt=0, le=MAX_FETCH_INTERVAL)
    suspended: bool = False
    webhook_secret: str | None = Field(default=None, pattern=REF_PATTERN)
    credentials: str | None = Field(default=None, pattern=REF_PATTERN)

    @field_validator("repo")
    @classmethod
    def _no_control_characters(cls, value: str) -> str:
        if any(ord(c) < 32 for c in value) or value.startswith("-"):
            raise ValueError("a repo is a path or a Git URL, without control characters")
        return value

    @field_validator("branch")
    @classmethod
    def _branch_name(cls, value: str) -> str:
        if ".." in value or value.endswith((".lock", "/", ".")):
            raise ValueError(f"{value!r} is not a branch name git accepts")
        return value

    @field_validator("paths")
    @classmethod
    def _relative_paths(cls, value: list[str]) -> list[str]:
        problems = [why for why in (path_problem(p) for p in value) if why]
        problems += overlap_problems(value)
        if problems:
            raise ValueError("; ".join(problems[:5]))
        return value

    def to_source(self, origin: SourceOrigin = "api") -> Source:
        return Source(
            name=self.name,
            repo=self.repo,
            project=self.project,
            branch=self.branch,
            paths=tuple(self.paths),
            fetch_interval=self.fetch_interval,
            suspended=self.suspended,
            webhook_secret_ref=self.webhook_secret,
            credentials_ref=self.credentials,
            origin=origin,
        )


def path_problem(path: str) -> str | None:
    """Why `path` is not a directory of the repo as a source's `paths:` names it (None:
    it is): relative, in normal form (`teams/a`: no leading, trailing or double `/`, no
    `.` or `..`), at most 500 characters, without control characters or the characters
    git reads as a pattern (`\\ : * ? [ ]`)."""
    if not path:
        return "'' is not a directory: leave `paths` out to read the whole repo"
    if len(path) > MAX_PATH_LENGTH:
        return f"{path[:40]!r}…: a directory is at most {MAX_PATH_LENGTH} characters"
    parts = path.split("/")
    if ".." in parts:
        return f"{path!r}: '..' leaves the repo; name a directory inside it"
    if path.startswith("/"):
        return f"{path!r} is absolute: name it relative to the repo's root, like {_normal(path)!r}"
    if any(part in ("", ".") for part in parts):
        return f"{path!r} is not in normal form: write it {_normal(path)!r}"
    if not all(_PATH_SEGMENT.match(part) for part in parts):
        return f"{path!r}: no control characters nor any of \\ : * ? [ ] in a directory"
    return None


def _normal(path: str) -> str:
    return "/".join(p for p in path.split("/") if p not in ("", ".")) or "(the whole repo)"


def overlap_problems(paths: Sequence[str]) -> list[str]:
    """Each directory named twice, or inside another one named (its configs would be
    the source's twice)."""
    problems = []
    for at, path in enumerate(paths):
        for other in paths[:at]:
            if path == other:
                problems.append(f"{path!r} is named twice: name each directory once")
            elif path.startswith(other + "/") or other.startswith(path + "/"):
                inner, outer = (path, other) if len(path) > len(other) else (other, path)
                problems.append(
                    f"{inner!r} is inside {outer!r}: name {outer!r} only, or the "
                    "directories within it you mean"
                )
    return problems


class SourcesFile(StrictModel):
    """The `--sources-config` file: `sources: [SourceSpec, ...]`."""

    sources: list[SourceSpec] = Field(default_factory=list, max_length=MAX_SOURCES)


def source_to_dict(source: Source) -> dict[str, Any]:
    """The API's view of a source: references are shown, never what they point at."""
    return {
        "name": source.name,
        "repo": source.repo,
        "project": source.project,
        "branch": source.branch,
        "paths": list(source.paths),
        "fetch_interval": source.fetch_interval,
        "suspended": source.suspended,
        "webhook_secret": source.webhook_secret_ref,
        "credentials": source.credentials_ref,
        "origin": source.origin,
    }


_HTTP_USERINFO = re.compile(r"\b(https?://)[^/@\s]+@", re.IGNORECASE)
_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^/@\s:]+):[^/@\s]+@", re.IGNORECASE)


def without_credentials(text: str) -> str:
    """`text` with the credentials of every URL in it left out: an HTTP(S) URL's user and
    password (a token is often the user: `https://token@host/x` → `https://host/x`), any
    other URL's password (`ssh://git:pw@host` → `ssh://git@host`). How a repo, or an error
    naming it, is shown."""
    return _PASSWORD.sub(r"\1@", _HTTP_USERINFO.sub(r"\1", text))


def source_state(source: Source, last_status: str | None, last_error: str | None) -> str:
    """`suspended`, `failing` (its newest finished pass failed or was aborted, not for
    being suspended) or `following`."""
    if source.suspended:
        return "suspended"
    held = (last_error or "").startswith("suspended:")
    if last_status in ("failed", "aborted") and not held:
        return "failing"
    return "following"


def project_conflict(sources: Iterable[Source], candidate: Source) -> str | None:
    """Why `candidate` may not be added beside `sources` (None: it may)."""
    for other in sources:
        if other.name != candidate.name and other.project == candidate.project:
            return (
                f"project {candidate.project!r} is already fed by source {other.name!r}; "
                f"source {candidate.name!r} cannot feed it too: one source per project "
                "(use `paths:` to feed other projects from the same repo)"
            )
    return None


def one_per_project(sources: Sequence[Source]) -> None:
    """`UsageError` when two sources feed one project or two share a name."""
    seen: dict[str, Source] = {}
    names: set[str] = set()
    for source in sources:
        if source.name in names:
            raise UsageError(f"two sources are named {source.name!r}: names are unique")
        names.add(source.name)
        other = seen.get(source.project)
        if other is not None:
            raise UsageError(project_conflict([other], source) or "")
        seen[source.project] = source


def parse_ref(ref: str) -> tuple[Literal["env", "file"], str]:
    """(`env` or `file`, the name or path) of a reference `SourceSpec` accepted."""
    if not re.match(REF_PATTERN, ref):
        raise UsageError(f"{ref!r}: a reference is env:NAME or file:/absolute/path")
    kind, _, rest = ref.partition(":")
    return ("env" if kind == "env" else "file"), rest


def parse_sources_file(text: str | bytes, path: str) -> list[Source]:
    """The file's sources, or `ConfigError` naming every problem by file:line:col."""
    source_text, problems = decode(text, path)
    if problems:
        raise ConfigError(list(problems))
    document = load_document(source_text, path)
    if document.problems:
        raise ConfigError(list(document.problems))
    data = {} if document.data is None else document.data
    if not isinstance(data, dict):
        raise ConfigError([Problem(path, 1, 1, "", "the sources file must be a mapping")])
    try:
        parsed = SourcesFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)[:50]
        raise ConfigError(locate_errors(errors, document.node, SourcesFile, path)) from None
    clashes: list[Any] = []
    by_project: dict[str, str] = {}
    by_name: set[str] = set()
    for at, spec in enumerate(parsed.sources):
        if spec.name in by_name:
            msg = f"a second source named {spec.name!r}: names are unique"
            clashes.append({"type": "value_error", "loc": ("sources", at, "name"), "msg": msg})
        by_name.add(spec.name)
        first = by_project.setdefault(spec.project, spec.name)
        if first != spec.name:
            msg = (
                f"project {spec.project!r} is already fed by source {first!r}; source "
                f"{spec.name!r} cannot feed it too: one source per project"
            )
            clashes.append({"type": "value_error", "loc": ("sources", at, "project"), "msg": msg})
    if clashes:
        raise ConfigError(locate_errors(clashes, document.node, SourcesFile, path))
    return [spec.to_source("file") for spec in parsed.sources]


_SCP_LIKE = re.compile(r"^(?:[\w.-]+@)?([\w.-]+):(?!//)(.+)$")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://(?:[^@/]*@)?([^/:]+)(?::\d+)?/(.+)$", re.IGNORECASE)


def repository_key(repo: str) -> str:
    """One form of a repository however it is written: `host/owner/name` (lower case, no
    `.git`, no user or port) for a URL or `git@host:owner/name`; a path as given. So the
    HTTPS and SSH URLs of one repository, and a delivery's `clone_url`, compare equal."""
    text = repo.strip()
    found = _URL.match(text)
    if found is None and not text.startswith(("/", ".", "~")):
        found = _SCP_LIKE.match(text)
    if found is None:
        return text.rstrip("/")
    host, path = found.group(1), found.group(2)
    path = path.strip("/").removesuffix(".git").strip("/")
    return f"{host}/{path}".lower()


def delivery_repositories(provider: str, payload: dict[str, Any]) -> set[str]:
    """The keys (`repository_key`) of the repository a verified delivery is about: GitHub's
    `repository.{clone_url,ssh_url,html_url,git_url}`, GitLab's `project.{git_http_url,
    git_ssh_url,web_url}` and `repository.{url,git_http_url,git_ssh_url,homepage}`."""
    fields: list[tuple[str, tuple[str, ...]]]
    if provider == "github":
        fields = [("repository", ("clone_url", "ssh_url", "html_url", "git_url"))]
    else:
        fields = [
            ("project", ("git_http_url", "git_ssh_url", "web_url")),
            ("repository", ("url", "git_http_url", "git_ssh_url", "homepage")),
        ]
    keys: set[str] = set()
    for section, names in fields:
        value = payload.get(section)
        if not isinstance(value, dict):
            continue
        for name in names:
            url = value.get(name)
            if isinstance(url, str) and 0 < len(url) <= 2000:
                keys.add(repository_key(url))
    return keys


def route_delivery(
    sources: Sequence[Source], verified: set[str], server_verified: bool, repositories: set[str]
) -> tuple[list[Source], str | None]:
    """The sources a verified delivery reconciles, or (none, why) when it reconciles none.

    `verified`: the names of the sources whose secret proved the delivery;
    `server_verified`: the server's `--webhook-secret` proved it. The sources of the
    delivery's repository are those it may reach, and only those whose own secret proved
    it (a delivery for repo A signed with repo B's secret reaches nothing: refused). A
    repository no source names is ignored, except that a delivery proved by the server's
    secret still goes to the `--repo` source, as before sources.
    """
    named = [s for s in sources if repository_key(s.repo) in repositories]
    if named:
        allowed = [s for s in named if s.name in verified]
        if allowed:
            return allowed, None
        names = ", ".join(sorted(s.name for s in named))
        return [], f"refused: not signed with the webhook secret of source {names}"
    flags = [s for s in sources if s.origin == "flags"]
    if flags and server_verified:
        return flags, None
    shown = sorted(repositories)[0] if repositories else "(none named)"
    return [], f"ignored: no source follows repository {shown}"


def foreign_repository(provider: str, payload: dict[str, Any], source: Source) -> str | None:
    """Why a verified pull-request delivery routed to `source` must not be answered, or
    None. The bot posts to the repository the delivery names (GitHub's
    `repository.full_name`, GitLab's `project.path_with_namespace`) with the source's own
    token, so a delivery whose URL fields route it to the source but whose name is another
    repository is refused: else whoever holds a source's webhook secret could have its
    token post to any repository it reaches. A source followed by a local path has no
    name to compare with (the operator's own mirror): the delivery's name is taken."""
    found = _URL.match(source.repo.strip())
    if found is None and not source.repo.strip().startswith(("/", ".", "~")):
        found = _SCP_LIKE.match(source.repo.strip())
    if found is None:
        return None
    expected = found.group(2).strip("/").removesuffix(".git").strip("/").lower()
    section, field = (
        ("repository", "full_name") if provider == "github" else ("project", "path_with_namespace")
    )
    named = payload.get(section)
    name = named.get(field) if isinstance(named, dict) else None
    if isinstance(name, str) and name.strip("/").lower() == expected:
        return None
    shown = name[:200] if isinstance(name, str) else "no repository"
    return (
        f"the delivery names {shown!r}, source {source.name} follows {expected!r}: nothing posted"
    )
