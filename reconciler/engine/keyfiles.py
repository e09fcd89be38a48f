"""Which key files a fleet may name: `identity_file` only inside the operator's directories.

A fleet's `ssh_config.identity_file` (and a host's or a proxy jump's) is a path on the
server's host that the server reads to log in. A config-repo writer must not make it read
any file the server can (`/etc/shadow`, the admin token): `check_target_keys` resolves
each path (symlinks followed, `~` expanded) and accepts it only inside one of the allowed
directories (`Settings.allowed_key_dirs`: `--key-dir`, default the data dir and the
server user's `~/.ssh`), only as a regular file that parses as a private key. Anything else
is a `DeployError` (`bad_key`) naming the host and the file, which fails the fleet with that
status message (no retry loop). Called by the controller before deploying an agent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import asyncssh

from agent.deploy import DeployError, DeployFailure
from agent.tunnel import SSHTarget


def key_file_problem(path: str, allowed: Sequence[Path]) -> str | None:
    """Why `path` may not be used as a key file, or None when it may."""
    resolved = Path(os.path.realpath(os.path.expanduser(path)))
    roots = [Path(os.path.realpath(os.path.expanduser(str(root)))) for root in allowed]
    if not any(resolved == root or root in resolved.parents for root in roots):
        where = ", ".join(str(root) for root in roots)
        return (
            f"identity_file {path} is outside the key directories the server allows ({where}); "
            "put the key there or start the server with --key-dir"
        )
    if not resolved.is_file():
        return f"identity_file {path} is not a file"
    try:
        asyncssh.read_private_key(str(resolved))
    except (OSError, asyncssh.KeyImportError, ValueError) as exc:
        first = (str(exc) or type(exc).__name__).splitlines()[0]
        return f"identity_file {path} is not a usable private key ({first})"
    return None


def check_target_keys(target: SSHTarget, allowed: Sequence[Path]) -> None:
    """Raise `DeployError(bad_key)` when `target`'s key, or its jump host's, is not usable."""
    hop: SSHTarget | None = target
    while hop is not None:
        if hop.identity_file:
            problem = key_file_problem(hop.identity_file, allowed)
            if problem is not None:
                raise DeployError(str(target), DeployFailure.bad_key, problem)
        hop = hop.proxy_jump
