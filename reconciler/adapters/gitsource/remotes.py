"""Where a config repo lives and how to authenticate to it (no I/O but reading env vars
passed in by the caller).

A repo is a local path, a `file://` URL, an `https://` URL (token from an environment
variable, sent as an HTTP header through git's `GIT_CONFIG_*` variables, so it is never
written to disk or into a URL), or an SSH URL (`ssh://…` or `git@host:owner/repo.git`)
with an optional private key file.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TOKEN_ENV = "DOCKYARD_GIT_TOKEN"
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:")


@dataclass(frozen=True, slots=True)
class RepoLocation:
    """A config repo: URL or path, branch, subdirectory, credentials."""

    url: str
    branch: str = "main"
    subdir: str = ""
    token: str | None = None
    ssh_key: Path | None = None
    roots: tuple[str, ...] = ()
    """Several directories (of the repo's root) holding the configs; none: all of `subdir`."""

    @property
    def scheme(self) -> str:
        """`local`, `file`, `https`, `http` or `ssh`."""
        if self.url.startswith(("https://", "http://")):
            return self.url.split(":", 1)[0]
        if self.url.startswith("file://"):
            return "file"
        if self.url.startswith("ssh://") or _SCP_LIKE.match(self.url):
            return "ssh"
        return "local"

    @property
    def clone_url(self) -> str:
        """What `git clone` gets: local paths become absolute."""
        if self.scheme == "local":
            return str(Path(self.url).expanduser().resolve())
        return self.url

    @property
    def mirror_name(self) -> str:
        """A stable directory name for this repo's mirror under the data dir."""
        digest = hashlib.sha256(self.clone_url.encode()).hexdigest()[:16]
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.clone_url.rstrip("/").rsplit("/", 1)[-1])
        return f"{stem.removesuffix('.git') or 'repo'}-{digest}.git"

    def git_env(self) -> dict[str, str]:
        """Environment for git commands: never prompt, and carry the credentials."""
        env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}
        if self.token and self.scheme in ("https", "http"):
            basic = base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
            env |= {
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
            }
        if self.scheme == "ssh":
            options = "-o BatchMode=yes -o StrictHostKeyChecking=accept-new"
            if self.ssh_key is not None:
                key = shlex.quote(str(self.ssh_key))
                options += f" -i {key} -o IdentitiesOnly=yes"
            env["GIT_SSH_COMMAND"] = f"ssh {options}"
        return env

    def scrub(self, text: str) -> str:
        """`text` without the token (in plain or header form)."""
        if not self.token:
            return text
        basic = base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
        return text.replace(self.token, "***").replace(basic, "***")


def location_from_env(
    url: str,
    *,
    branch: str = "main",
    subdir: str = "",
    ssh_key: Path | None = None,
    environ: Mapping[str, str],
    token_env: str = DEFAULT_TOKEN_ENV,
) -> RepoLocation:
    """A location whose https token comes from `environ[token_env]` (if set)."""
    return RepoLocation(
        url=url,
        branch=branch,
        subdir=subdir.strip("/"),
        token=environ.get(token_env) or None,
        ssh_key=ssh_key,
    )
