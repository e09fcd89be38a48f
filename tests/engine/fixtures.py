"""Real parts for engine tests: a git config repo on disk, a SQLite store, a git source.

`ConfigRepo` commits files with the git CLI; `make_reconciler` wires the real store, the
real `GitSource` (mirror in the data dir) and the local stacks engine, with `hint`
recorded so tests can see which workers a pass woke.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.adapters.gitsource.remotes import RepoLocation
from reconciler.adapters.gitsource.source import GitSource
from reconciler.engine.previewing import Previewer
from reconciler.engine.reconciling import GitConfigSource, Reconciler
from reconciler.engine.worker import Lease, Worker, WorkerConfig
from reconciler.ports import WorkKind
from schemas import parse_config
from stacks.local import LocalEngine, LocalSettings
from stacks.protocol import Engine, EngineName


class ConfigRepo:
    """A git repo whose branch `main` is the desired state."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "test@example.com")
        self.git("config", "user.name", "test")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=self.path, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def commit(self, files: dict[str, str | None], message: str = "change") -> str:
        """Write (or, for None, delete) files and commit; returns the commit SHA."""
        for name, text in files.items():
            target = self.path / name
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")


def task_yaml(name: str, *commands: str) -> str:
    lines = "".join(f"  - {c!r}\n" for c in commands or ("echo hi",))
    return (
        f"type: task\nname: {name}\ncommands:\n{lines}"
        "resources:\n  cpu: 1..\n  memory: 0.1GB..\n  disk: 0.1GB..\n"
    )


def service_yaml(name: str, port: int) -> str:
    return (
        f"type: service\nname: {name}\nport: {port}\nauth: false\n"
        f"commands:\n  - python3 -m http.server {port}\n"
        "resources:\n  cpu: 1..\n  memory: 0.1GB..\n  disk: 0.1GB..\n"
    )


@dataclass
class Rig:
    store: Store
    repo: ConfigRepo
    reconciler: Reconciler
    worker: Worker
    hints: list[WorkKind] = field(default_factory=list)
    retries: list[tuple[str, float]] = field(default_factory=list)

    def request(self, project: str = "main", revision: str | None = None) -> str:
        project_row = self.store.get_or_create_project(project)
        return self.store.create_reconcile(
            project_row.id, trigger="api", attempted_revision=revision
        ).id


def make_rig(tmp_path: Path, engines: dict[EngineName, Engine] | None = None) -> Rig:
    store = Store.from_url(f"sqlite:///{tmp_path / 'dockyard.db'}", migrate=True)
    repo = ConfigRepo(tmp_path / "config-repo")
    source = GitSource(RepoLocation(str(repo.path)), data_dir=tmp_path / "data", parse=parse_config)
    local = LocalEngine(LocalSettings(data_dir=tmp_path / "data", user="root"))
    hints: list[WorkKind] = []
    retries: list[tuple[str, float]] = []
    reconciler = Reconciler(
        store,
        GitConfigSource(source),
        previewer=Previewer(engines if engines is not None else {"local": local}),
        hint=hints.append,
        retry=lambda project_id, delay: retries.append((project_id, delay)),
        capacity_wait=0.0,
    )
    worker = Worker(
        WorkerConfig(kind="reconciles", concurrency=1),
        leasing=StoreLeasing(store.leases, make_lease=Lease),
        process=reconciler.process,
    )
    return Rig(store, repo, reconciler, worker, hints, retries)
