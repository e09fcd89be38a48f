"""What starts a reconcile: queued requests (coalesced), the periodic fetch, retries.

Triggers only *queue and hint*; the `reconciles` worker does the work.

- `queue_reconcile` (webhook, `dockyard reconcile`, the API, startup, the timer) adds a
  `queued` reconcile row — or, when one is already queued and not yet taken, returns that
  one, moved to the newest revision asked for (a head request, `None`, wins over a pinned
  one: the head is the newest). So a burst of pushes makes one reconcile, not twenty.
- `Timers` runs apscheduler for the periodic fetch (`fetch_interval`, default 60 s; a
  `fetch_interval` set in the repo's `.dockyard.yml` replaces it once a commit declaring
  it has been read) and for retries of a pass that failed transiently. A retry asks for
  the branch head, never the old commit, so a newer commit always pre-empts retries of an
  older failing one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from reconciler.adapters.db.store import Store
from reconciler.ports import Trigger

log = logging.getLogger(__name__)

RequestReconcile = Callable[[str], Awaitable[object]]
"""`request(project_name)`: queue a timer-triggered reconcile of the project."""


def queue_reconcile(
    store: Store,
    project: str,
    *,
    trigger: Trigger,
    delivery_id: str | None = None,
    revision: str | None = None,
) -> str:
    """Queue a reconcile of `project` (coalescing with a queued one); return its id."""
    project_id = store.ensure_project(project)
    return store.queue_reconcile(
        project_id, trigger=trigger, delivery_id=delivery_id, revision=revision
    )


class Timers:
    """The periodic fetch and the retry timers (apscheduler, in the server's event loop)."""

    def __init__(self, request: RequestReconcile, *, fetch_interval: float) -> None:
        self._request = request
        self._fetch_interval = fetch_interval
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._projects: set[str] = set()

    def start(self, projects: set[str]) -> None:
        """Start the scheduler with one periodic fetch per project."""
        if self._scheduler.running:
            return
        self._projects = set(projects)
        for project in sorted(self._projects):
            self._scheduler.add_job(
                self._request,
                "interval",
                args=[project],
                seconds=self._fetch_interval,
                id=f"fetch-{project}",
                replace_existing=True,
                coalesce=True,
                max_instances=1,
            )
        self._scheduler.start()

    def follow(self, project: str, seconds: float) -> None:
        """Fetch `project` every `seconds` from now on (a source added, or its interval
        changed); the scheduler must be running."""
        if not self._scheduler.running or self.set_interval(project, seconds):
            return
        if self._scheduler.get_job(f"fetch-{project}") is not None:
            return
        self._projects.add(project)
        self._scheduler.add_job(
            self._request,
            "interval",
            args=[project],
            seconds=seconds,
            id=f"fetch-{project}",
            replace_existing=True,
            coalesce=True,
            max_instances=1,
        )

    def unfollow(self, project: str) -> None:
        """No more periodic fetches or retries of `project` (its source is gone)."""
        self._projects.discard(project)
        if not self._scheduler.running:
            return
        for job_id in (f"fetch-{project}", f"retry-{project}"):
            if self._scheduler.get_job(job_id) is not None:
                self._scheduler.remove_job(job_id)

    def stop(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def set_interval(self, project: str, seconds: float) -> bool:
        """Fetch `project` every `seconds` from now on; False when nothing changed."""
        job = self._scheduler.get_job(f"fetch-{project}") if self._scheduler.running else None
        if job is None or float(job.trigger.interval.total_seconds()) == float(seconds):
            return False
        self._scheduler.reschedule_job(job.id, trigger="interval", seconds=seconds)
        return True

    def retry_later(self, project: str, delay: float) -> None:
        """Queue a reconcile of the branch head of `project` after `delay` seconds."""
        if not self._scheduler.running:
            return
        when = datetime.now(UTC) + timedelta(seconds=max(delay, 0.0))
        self._scheduler.add_job(
            self._request,
            "date",
            args=[project],
            run_date=when,
            id=f"retry-{project}",
            replace_existing=True,
        )
