"""Settings of the Pulumi engine (no Pulumi import: safe to build without the extra)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stacks.programs.config import ProgramSettings


@dataclass(frozen=True, slots=True)
class PulumiSettings:
    """How to run Pulumi here; `passphrase` and `env` are never shown (repr=False)."""

    data_dir: Path
    programs: ProgramSettings
    passphrase: str = field(repr=False)
    backend_url: str | None = None
    pulumi_root: Path | None = None
    search_path: str | None = None
    max_parallel: int = 4
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def state_url(self) -> str:
        return self.backend_url or (self.data_dir / "pulumi" / "state").as_uri()
