"""Real parts for engine tests: a git config repo on disk, a SQLite store, a git source.

`ConfigRepo` commits files with the git CLI; `make_reconciler` wires the real store, the
real `GitSource` (mirror in the data dir) and the local stacks engine, with `hint`
recorded so tests can see which workers a pass woke.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.adapters.db.models import Reconcile, Run
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.adapters.gitsource.remotes import RepoLocation
from reconciler.adapters.gitsource.source import GitSource
from reconciler.core.policy import RepoPolicy
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
    policies: list[tuple[str, RepoPolicy]] = field(default_factory=list)

    def request(self, project: str = "main", revision: str | None = None) -> str:
        project_row = self.store.get_or_create_project(project)
        return self.store.create_reconcile(
            project_row.id, trigger="api", attempted_revision=revision
        ).id


def make_rig(
    tmp_path: Path,
    engines: dict[EngineName, Engine] | None = None,
    *,
    db_url: str | None = None,
) -> Rig:
    store = Store.from_url(db_url or f"sqlite:///{tmp_path / 'dockyard.db'}", migrate=True)
    repo = ConfigRepo(tmp_path / "config-repo")
    source = GitSource(RepoLocation(str(repo.path)), data_dir=tmp_path / "data", parse=parse_config)
    local = LocalEngine(LocalSettings(data_dir=tmp_path / "data", user="root"))
    hints: list[WorkKind] = []
    retries: list[tuple[str, float]] = []
    policies: list[tuple[str, RepoPolicy]] = []
    reconciler = Reconciler(
        store,
        GitConfigSource(source),
        previewer=Previewer(engines if engines is not None else {"local": local}),
        hint=hints.append,
        retry=lambda project_id, delay: retries.append((project_id, delay)),
        capacity_wait=0.0,
        on_policy=lambda project, policy: policies.append((project, policy)),
    )
    worker = Worker(
        WorkerConfig(kind="reconciles", concurrency=1),
        leasing=StoreLeasing(store.leases, make_lease=Lease),
        process=reconciler.process,
    )
    return Rig(store, repo, reconciler, worker, hints, retries, policies)


class LiveLoop:
    """The whole runtime (`build_controller`) on a git repo, with a real local agent.

    `reconcile()` queues a reconcile and waits for it; `until()` polls the store with a
    deadline while the workers run in the background.
    """

    def __init__(self, tmp_path: Path, **settings: object) -> None:
        from reconciler.engine.controller import build_controller
        from reconciler.settings import Settings

        self.repo = ConfigRepo(tmp_path / "config-repo")
        self.data_dir = tmp_path / "data"
        self.settings = Settings(
            repo=str(self.repo.path),
            data_dir=self.data_dir,
            fetch_interval=3600,
            cli_config=tmp_path / "cli.yml",
            **settings,
        )
        self.store = Store.from_url(f"sqlite:///{tmp_path / 'dockyard.db'}", migrate=True)
        self.controller = build_controller(self.settings, self.store)
        self.project_id = self.store.get_or_create_project("main").id

    async def __aenter__(self) -> LiveLoop:
        self.controller.runtime.projects.clear()  # no startup reconcile: tests trigger them
        await self.controller.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        from agent.local import stop_local_agent

        for run in self.store.list_runs(self.project_id):
            if run.status not in ("done", "failed", "terminated"):
                await self.controller.stop_run("main", run.run_name, abort=True)
        await self.until(self._all_finished, within=30)
        await self.controller.stop()
        stop_local_agent(self.data_dir)
        self.store.close()

    def _all_finished(self) -> bool:
        return all(
            r.status in ("done", "failed", "terminated")
            for r in self.store.list_runs(self.project_id)
        )

    async def reconcile(self, *, within: float = 60.0) -> Reconcile:
        reconcile_id = await self.controller.request_reconcile("main", trigger="api")

        def finished() -> bool:
            row = self.store.get_reconcile(reconcile_id)
            return row is not None and row.status in ("succeeded", "failed", "aborted")

        await self.until(finished, within=within)
        row = self.store.get_reconcile(reconcile_id)
        assert row is not None
        return row

    def runs(self, name: str | None = None) -> list[Run]:
        rows = self.store.list_runs(self.project_id)
        rows = [r for r in rows if name is None or r.run_name == name]
        return sorted(rows, key=lambda r: (r.run_name, r.submitted_at))

    def logs(self, run: Run) -> str:
        path = self.data_dir / "projects" / "main" / "logs" / run.run_name
        texts = []
        for job in self.store.list_jobs(run.id):
            log = path / f"{job.id}.log"
            texts.append(log.read_text(errors="replace") if log.exists() else "")
        return "".join(texts)

    def describe(self) -> str:
        lines = []
        for run in self.runs():
            lines.append(f"run {run.run_name} {run.status} {run.status_message!r}")
            for job in self.store.list_jobs(run.id):
                lines.append(f"  job {job.status} {job.termination_reason} {job.status_message!r}")
        for inst in self.store.list_instances(project_id=self.project_id):
            lines.append(f"instance {inst.name} {inst.status} {inst.status_message!r}")
        return "\n".join(lines)

    async def until(self, condition: Callable[[], bool], *, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached within {within}s:\n{self.describe()}")
            await asyncio.sleep(0.05)
