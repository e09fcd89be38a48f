"""A source: one config repo (or a part of one) that feeds one project.

The server follows every source (`reconciler.engine.sourceloops`): each is fetched,
planned and applied by its own loop, so one that hangs never delays another. Sources
come from three places (`origin`): the `--repo`/`--project` flags (`flags`, the one-source
shorthand), the `--sources-config` file (`file`) and the admin API (`api`). Secrets are
never held here: `webhook_secret_ref` and `credentials_ref` name where the server reads
them (`env:NAME` or `file:PATH`, `reconciler.core.sources`), and only the reference is
ever shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SourceOrigin = Literal["flags", "file", "api"]


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    repo: str
    """A path or a Git URL (`file://`, `https://`, `ssh://`, `git@host:owner/repo`)."""
    project: str
    branch: str = "main"
    paths: tuple[str, ...] = ()
    """The directories within the repo that hold the configs (none: the whole repo)."""
    fetch_interval: float | None = None
    """Seconds between periodic fetches (None: the server's `--fetch-interval`)."""
    suspended: bool = False
    """Fetch and plan, apply nothing (Flux's `suspend`)."""
    webhook_secret_ref: str | None = None
    credentials_ref: str | None = None
    origin: SourceOrigin = "api"

    @property
    def subdir(self) -> str:
        """The directory the source's snapshot is relative to: its one directory (whose
        `.dockyard.yml` is the policy and whose `paths` are relative to it), or the repo's
        root when it names none or several."""
        return self.paths[0] if len(self.paths) == 1 else ""

    @property
    def roots(self) -> tuple[str, ...]:
        """The directories the source's configs must be in when it names several (none:
        every config under `subdir`)."""
        return self.paths if len(self.paths) > 1 else ()
