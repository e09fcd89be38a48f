"""The sources a server declares at start: the `--repo` flags' and the sources file's.

Called once by `reconciler.app.build_server`, before anything else starts: a bad file
stops the server with every problem as `file:line:col: field: message` (`UsageError`),
and so do two declared sources feeding one project (both named). The declared sources
replace those of the previous start in the store (`SourcesStore.declare_sources`); the
admin API's own sources are kept.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.core.sources import one_per_project, parse_sources_file
from reconciler.domain.sources import Source
from reconciler.errors import UsageError
from schemas.problems import ConfigError

MAX_BYTES = 1024 * 1024


def flags_source(repo: str | None, project: str, branch: str, path: str) -> Source | None:
    """The `--repo/--project` shorthand as a source named after its project (None
    without `--repo`); its webhook secret is the server's `--webhook-secret`."""
    if not repo:
        return None
    paths = (path.strip("/"),) if path.strip("/") else ()
    return Source(
        name=project, repo=repo, project=project, branch=branch, paths=paths, origin="flags"
    )


def read_sources_file(path: Path) -> list[Source]:
    """The file's sources, or `UsageError` with every problem by file:line."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(
            f"sources file {path}: cannot read it ({exc.strerror or exc}): "
            "fix --sources-config (DOCKYARD_SOURCES_CONFIG) or the file's permissions"
        ) from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"sources file {path}: larger than {MAX_BYTES} bytes")
    try:
        return parse_sources_file(data, str(path))
    except ConfigError as exc:
        lines = "\n".join(problem.format() for problem in exc.problems)
        raise UsageError(
            f"the sources file is invalid; the server does not start:\n{lines}"
        ) from None


def declared_sources(flags: Source | None, sources_file: Path | None) -> list[Source]:
    """The flags' source and the file's, checked together (one source per project)."""
    declared = [flags] if flags is not None else []
    if sources_file is not None:
        declared += read_sources_file(sources_file)
    try:
        one_per_project(declared)
    except UsageError as exc:
        where = f" (--repo/--project and {sources_file})" if flags and sources_file else ""
        raise UsageError(f"{exc}{where}; the server does not start") from None
    return declared
