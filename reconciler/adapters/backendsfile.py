"""Reading the server's backends file at start: which file, and its parsed contents.

Called once by `reconciler.app.build_server`, before anything else starts, so a bad file
stops the server with every problem as `file:line:col: field: message` (`UsageError`).
Which file (`backends_file_path`):

1. `--backends-config PATH` (`DOCKYARD_BACKENDS_CONFIG`): that file, which must exist;
2. else `<data-dir>/backends.yml` when it exists;
3. else dstack's own `~/.dstack/server/config.yml` when it exists (the CLI passes that path;
   tests pass theirs, never the caller's home);
4. else none: the server has no clusters, and the plan's `blocked` line names
   `<data-dir>/backends.yml` as the file to create.

The key and kubeconfig files it names must be readable at start (a missing one is a
problem at its line). The file may hold credentials (an inline key, a kubeconfig's
text): it is read here only, and nothing of it is logged.
"""

from __future__ import annotations

import os
from pathlib import Path

from reconciler.core.clusterbackends import ServerBackends
from reconciler.errors import UsageError
from schemas.problems import ConfigError
from schemas.serverbackends import BackendsConfig, parse_backends_config

DEFAULT_NAME = "backends.yml"
MAX_BYTES = 1024 * 1024


def _readable(named: str) -> str | None:
    """None when the credential file can be opened for reading, else why not."""
    try:
        with open(os.path.expanduser(named), "rb"):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def backends_file_path(
    explicit: Path | None, data_dir: Path, dstack_config: Path | None
) -> tuple[Path, bool]:
    """(the file to read, whether it is there) by the rules of the module docstring."""
    if explicit is not None:
        return explicit, True
    default = data_dir / DEFAULT_NAME
    if default.is_file():
        return default, True
    if dstack_config is not None and dstack_config.is_file():
        return dstack_config, True
    return default, False


def load_server_backends(
    explicit: Path | None, data_dir: Path, dstack_config: Path | None = None
) -> ServerBackends:
    """The backends file in force, or `UsageError` saying what is wrong with it."""
    path, found = backends_file_path(explicit, data_dir, dstack_config)
    if not found:
        return ServerBackends(str(path), BackendsConfig(), found=False)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(
            f"backends file {path}: cannot read it ({exc.strerror or exc}): "
            "fix --backends-config (DOCKYARD_BACKENDS_CONFIG) or the file's permissions"
        ) from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"backends file {path}: larger than {MAX_BYTES} bytes")
    try:
        config = parse_backends_config(data, str(path), readable=_readable)
    except ConfigError as exc:
        lines = "\n".join(problem.format() for problem in exc.problems)
        raise UsageError(
            f"the backends file is invalid; the server does not start:\n{lines}"
        ) from None
    return ServerBackends(str(path), config)
