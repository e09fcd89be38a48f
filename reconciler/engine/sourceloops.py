"""Every stored source followed by its own loop: a reconciles worker and a fetch timer.

`SourceLoops` is built by `build_controller` and driven by `EngineController`: `sync()`
reads the store's sources (at start, after an admin's change through the API, and every
`resync` seconds for other replicas' changes) and starts a loop for each new source,
stops the loop of each one gone, and starts again the loop of one whose repo, branch,
paths or credentials changed. A loop is a `Worker` of the "reconciles" kind that leases
only its project's rows (`adapters.db.sourceleasing`) and runs that source's own
`Reconciler` (its own git mirror), plus a periodic fetch at the source's interval. So a
source whose fetch hangs holds one worker and one thread, never another source's pass.

The `--repo/--project` shorthand (origin `flags`) is not followed here: the runtime's own
reconciler follows it, as it always did (`build_controller`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.adapters.db.refusals import refused_by_store
from reconciler.adapters.db.sourceleasing import ProjectReconcileLeasing
from reconciler.adapters.db.store import Store
from reconciler.adapters.gitsource.remotes import RepoLocation
from reconciler.adapters.gitsource.source import GitSource
from reconciler.adapters.gitsource.sourcearchives import SourceArchives
from reconciler.core.sources import parse_ref
from reconciler.domain.sources import Source
from reconciler.engine.deployedpolicy import PolicySource
from reconciler.engine.previewing import Previewer
from reconciler.engine.reconciling import GitConfigSource, Reconciler
from reconciler.engine.triggers import Timers, queue_reconcile
from reconciler.engine.worker import Lease, Worker, WorkerConfig
from reconciler.settings import Settings
from schemas import parse_config

if TYPE_CHECKING:
    from reconciler.engine.controller import EngineController, Runtime

log = logging.getLogger(__name__)

SOURCE_RECONCILES = WorkerConfig(
    kind="reconciles", concurrency=1, lease_seconds=120.0, min_interval=0.0
)
MakeReconciler = Callable[[Source], Reconciler]


def source_location(source: Source, environ: Mapping[str, str]) -> RepoLocation:
    """Where the source's repo is and its own credentials: `env:NAME` is a token (https)
    or, for SSH, names a key file; `file:PATH` is a key file (SSH) or holds a token."""
    location = RepoLocation(
        url=source.repo, branch=source.branch, subdir=source.subdir, roots=source.roots
    )
    if source.credentials_ref is None:
        return location
    kind, value = parse_ref(source.credentials_ref)
    named = environ.get(value, "") if kind == "env" else value
    if location.scheme == "ssh":
        return replace(location, ssh_key=Path(named))
    token = named if kind == "env" else _read_token(Path(value))
    return replace(location, token=token or None)


def _read_token(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()[:4096] or None
    except OSError as exc:
        log.warning("credentials file %s cannot be read: %s", path, exc.strerror or exc)
        return None


def _restart_key(source: Source) -> tuple[object, ...]:
    """What a running loop was built from: a change of any of these starts it anew."""
    return (source.project, source.repo, source.branch, source.paths, source.credentials_ref)


@dataclass
class _Loop:
    source: Source
    worker: Worker
    config: PolicySource
    """The source's config repo (its mirror): its deployed `.dockyard.yml` is read there."""


class SourceLoops:
    """One loop per stored source (not the `flags` one); see the module docstring."""

    def __init__(
        self,
        store: Store,
        make_reconciler: MakeReconciler,
        timers: Timers,
        *,
        default_interval: float,
        identity: str = "",
        resync: float = 30.0,
    ) -> None:
        self._store = store
        self._make_reconciler = make_reconciler
        self._timers = timers
        self._default_interval = default_interval
        self._identity = identity
        self._resync = resync
        self._loops: dict[str, _Loop] = {}
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None

    @property
    def projects(self) -> dict[str, str]:
        """project → the name of the source that feeds it, for the running loops."""
        return {loop.source.project: name for name, loop in self._loops.items()}

    def worker(self, project: str) -> Worker | None:
        for loop in self._loops.values():
            if loop.source.project == project:
                return loop.worker
        return None

    def config_source(self, project: str) -> PolicySource | None:
        """The config repo of the source feeding `project` (None: no running loop)."""
        for loop in self._loops.values():
            if loop.source.project == project:
                return loop.config
        return None

    def hint(self) -> None:
        for loop in self._loops.values():
            loop.worker.hint()

    async def start(self) -> None:
        await self.sync()
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name="source-loops")

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        async with self._lock:
            loops, self._loops = list(self._loops.values()), {}
            for loop in loops:
                self._timers.unfollow(loop.source.project)
            await asyncio.gather(*(loop.worker.stop() for loop in loops))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._resync)
            try:
                await self.sync()
            except Exception:  # the next round tries again; the running loops go on
                log.exception("reading the sources failed")

    async def sync(self) -> list[str]:
        """Follow the store's sources now; the names of the loops started."""
        sources = await asyncio.to_thread(self._store.list_sources)
        wanted = {s.name: s for s in sources if s.origin != "flags"}
        started: list[str] = []
        async with self._lock:
            for name in [n for n in self._loops if n not in wanted]:
                await self._drop(name)
            for name, source in wanted.items():
                loop = self._loops.get(name)
                if loop is not None and _restart_key(loop.source) == _restart_key(source):
                    self._follow(source)
                    loop.source = source
                    continue
                if loop is not None:
                    await self._drop(name)
                try:
                    worker, config = self._worker(source)
                except Exception:
                    log.exception("source %s cannot be followed", name)
                    continue
                self._loops[name] = _Loop(source, worker, config)
                await worker.start()
                self._follow(source)
                started.append(name)
                await self._queue_startup(source)
        return started

    def _follow(self, source: Source) -> None:
        interval = source.fetch_interval or self._default_interval
        self._timers.follow(source.project, interval)

    async def _queue_startup(self, source: Source) -> None:
        await asyncio.to_thread(queue_reconcile, self._store, source.project, trigger="startup")
        worker = self.worker(source.project)
        if worker is not None:
            worker.hint()

    async def _drop(self, name: str) -> None:
        loop = self._loops.pop(name)
        self._timers.unfollow(loop.source.project)
        await loop.worker.stop()

    def _worker(self, source: Source) -> tuple[Worker, PolicySource]:
        reconciler = self._make_reconciler(source)
        leasing = ProjectReconcileLeasing(
            self._store.leases, source.project, make_lease=Lease, lane=self._store.lane
        )
        owner = f"{self._identity}/source:{source.name}" if self._identity else None
        worker = Worker(
            SOURCE_RECONCILES,
            leasing=leasing,
            process=reconciler.process,
            owner=owner,
            store_failure=refused_by_store,
        )
        return worker, reconciler.source


def source_reconcilers(
    settings: Settings,
    store: Store,
    runtime: Runtime,
    controller: EngineController,
    credentials: Callable[[str], str | None] | None,
    environ: Mapping[str, str] | None,
    archives: SourceArchives | None = None,
) -> MakeReconciler:
    """How a stored source's own `Reconciler` is made (`build_controller`): its own mirror
    under `<data-dir>/sources/<name>`, its own credentials, the project it feeds when its
    `.dockyard.yml` names none; the runtime's engines, catalog and hooks."""
    limits = settings.config_limits

    def make(source: Source) -> Reconciler:
        location = source_location(source, os.environ if environ is None else environ)
        git_source = GitSource(
            location,
            data_dir=settings.data_dir,
            parse=lambda text, path: parse_config(text, path, limits),
            limits=limits,
            mirror_root=settings.data_dir / "sources" / source.name,
            default_project=source.project,
        )
        if archives is not None:  # its runs' repos/files come from its own mirror
            archives.add(source.name, git_source)
        previewer = Previewer(
            runtime.deps.engines, credentials=credentials, clusters=controller.clusters
        )
        return Reconciler(
            store,
            GitConfigSource(git_source),
            previewer=previewer,
            hint=runtime.deps.hint,
            retry=controller.retry_later,
            on_policy=controller.apply_policy,
            catalog=runtime.catalog,
            job_users=runtime.job_users,
            held=lambda project: suspended_reason(store, project),
        )

    return make


def suspended_reason(store: Store, project: str) -> str | None:
    """Why a pass of `project` applies nothing: its source is suspended (None: it is not).
    Read at each pass, so a suspend or resume takes effect at the next one."""
    for source in store.list_sources(project):
        if source.suspended:
            return (
                f"suspended: source {source.name!r} is suspended; the commit was planned and "
                f"nothing was applied (resume with `dockyard source resume {source.name}`)"
            )
    return None
