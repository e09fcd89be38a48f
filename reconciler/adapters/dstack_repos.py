"""The repos dstack's client registers (`repos/init`) and the code diffs it uploads.

dstack 0.22.5 names a run's Git repo by an id of its own (`run_spec.repo_id`); the clone
URL only comes in `repos/init` (`repo_creds.clone_url`), and uncommitted changes come in
`repos/upload_code`, named by their sha256 (`run_spec.repo_code_hash`). Both are kept here,
one small JSON file per project and repo (`<data dir>/dstack-repos/<project id>/<sha256 of
the repo id>.json`, 0600): the clone URL and the archive digest of each of the last
`KEEP_CODES` diffs. Credentials are never written (the job clones with the host's git
credentials: `reconciler.core.cloning`). Called by `reconciler.web.dstack_repos`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

KEEP_CODES = 20
MAX_URL = 2048


@dataclass(frozen=True)
class KnownRepo:
    """A registered repo: where it is cloned from, and its uploaded diffs (hash -> digest)."""

    clone_url: str
    codes: dict[str, str] = field(default_factory=dict)


class DstackRepos:
    """See the module docstring."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "dstack-repos"

    def _path(self, project_id: str, repo_id: str) -> Path:
        name = hashlib.sha256(repo_id.encode()).hexdigest()
        return self.root / hashlib.sha256(project_id.encode()).hexdigest()[:32] / f"{name}.json"

    def get(self, project_id: str, repo_id: str) -> KnownRepo | None:
        try:
            raw = json.loads(self._path(project_id, repo_id).read_text())
        except (OSError, ValueError):
            return None
        codes = raw.get("codes") if isinstance(raw.get("codes"), dict) else {}
        return KnownRepo(
            str(raw.get("clone_url") or ""), {str(k): str(v) for k, v in codes.items()}
        )

    def register(self, project_id: str, repo_id: str, clone_url: str) -> None:
        """Keep `clone_url` for the repo (its diffs stay)."""
        known = self.get(project_id, repo_id)
        self._write(
            project_id, repo_id, KnownRepo(clone_url[:MAX_URL], known.codes if known else {})
        )

    def add_code(self, project_id: str, repo_id: str, code_hash: str, digest: str) -> None:
        """Name the archive `digest` as the diff `code_hash` of the repo (the last few)."""
        known = self.get(project_id, repo_id) or KnownRepo("")
        codes = {k: v for k, v in known.codes.items() if k != code_hash}
        codes[code_hash[:128]] = digest
        kept = dict(list(codes.items())[-KEEP_CODES:])
        self._write(project_id, repo_id, KnownRepo(known.clone_url, kept))

    def _write(self, project_id: str, repo_id: str, repo: KnownRepo) -> None:
        path = self._path(project_id, repo_id)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".repo-")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump({"clone_url": repo.clone_url, "codes": repo.codes}, handle)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
