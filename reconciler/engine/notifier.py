"""The notifier: sends the notifications the store queues, apart from the reconcile loop.

Each server runs one `Notifier` (started and stopped with the web app's lifespan,
`reconciler.web.app`). A pass follows the `events` outbox (`NotificationsStore.follow_events`:
one delivery row per event and receiver, whichever replica queues it), then claims due
deliveries with a lease and sends each in its own task: at most `concurrency` requests at
once, each bounded by `timeout` in all, no redirects followed. A receiver that is down or
slow costs only its own slot and its retries (back-off from `retry_base` doubling to
`retry_cap`, `max_attempts` in all); the reconcile loop, the workers and the API never wait
for it. Deliveries that ended more than `keep` ago are deleted (hourly, in batches).
What is sent is `core.notifying`'s: a signed JSON body, or a Slack `{"text"}`.
Tests drive `pass_once()` and `drain()` with the store's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta

import httpx

from reconciler.adapters.db.notifications import NotificationsStore
from reconciler.adapters.db.sessions import StoreBase
from reconciler.core.notifying import retry_delay, slack_request, webhook_request
from reconciler.domain.notifications import ClaimedDelivery

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NotifierConfig:
    poll: float = 2.0
    """Seconds between passes when nothing is due sooner (the events outbox is polled)."""
    concurrency: int = 4
    timeout: float = 5.0
    """Seconds one request may take in all (connect, send, the answer's head)."""
    lease: float = 60.0
    """Seconds a claimed delivery is this server's; longer than `timeout`."""
    max_attempts: int = 6
    retry_base: float = 5.0
    retry_cap: float = 600.0
    overlap: float = 30.0
    """Seconds of events read again each pass: an event committed that late is still sent."""
    keep: float = 30 * 86400.0
    """Seconds a delivered or failed notification stays listed before it is deleted."""
    prune_every: float = 3600.0


@dataclass(frozen=True, slots=True)
class Attempt:
    delivered: bool
    status_code: int | None
    error: str | None


class Notifier:
    """See the module docstring."""

    def __init__(
        self,
        store: NotificationsStore,
        config: NotifierConfig | None = None,
        *,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.store = store
        self.config = config or NotifierConfig()
        self._client = client
        self._inflight: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pruned_at = float("-inf")

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False)
        return self._client

    async def pass_once(self) -> int:
        """Queue new events' deliveries, then start sending what is due (as many as free
        slots allow); the number of deliveries started."""
        await asyncio.to_thread(self.store.follow_events, overlap=self.config.overlap)
        await self._prune()
        free = self.config.concurrency - len(self._inflight)
        if free <= 0:
            return 0
        claimed = await asyncio.to_thread(self.store.claim_due, free, self.config.lease)
        for delivery in claimed:
            task = asyncio.create_task(self._deliver(delivery))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        return len(claimed)

    async def _prune(self) -> None:
        now = self.store.now().timestamp()
        if now - self._pruned_at < self.config.prune_every:
            return
        self._pruned_at = now
        keep = timedelta(seconds=self.config.keep)
        await asyncio.to_thread(self.store.prune_deliveries, keep)

    async def drain(self) -> None:
        """Wait for the requests under way to end and be recorded."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    async def _deliver(self, delivery: ClaimedDelivery) -> None:
        attempt = await self.send(delivery)
        last = delivery.attempts + 1 >= self.config.max_attempts
        retry_in = None
        if not attempt.delivered and not last:
            retry_in = retry_delay(
                delivery.attempts + 1, base=self.config.retry_base, cap=self.config.retry_cap
            )
        recorded = await asyncio.to_thread(
            self.store.finish_attempt,
            delivery.id,
            delivery.token,
            delivered=attempt.delivered,
            status_code=attempt.status_code,
            error=attempt.error,
            retry_in=retry_in,
        )
        if not recorded:
            log.warning("notification %s: the lease was lost before its outcome", delivery.id)

    async def send(self, delivery: ClaimedDelivery) -> Attempt:
        """One request to the delivery's receiver; never raises."""
        receiver = delivery.receiver
        if receiver.kind == "slack":
            body, headers = slack_request(delivery.event)
        else:
            stamp = int(self.store.now().timestamp())
            body, headers = webhook_request(delivery.id, receiver, delivery.event, stamp)
        try:
            status = await asyncio.wait_for(
                self._post(receiver.url, body, headers), self.config.timeout
            )
        except TimeoutError:
            return Attempt(False, None, f"no answer within {self.config.timeout:g}s")
        except httpx.HTTPError as exc:
            return Attempt(False, None, f"{type(exc).__name__}: {exc}"[:500])
        if 200 <= status < 300:
            return Attempt(True, status, None)
        return Attempt(False, status, f"answered HTTP {status}")

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        timeout = httpx.Timeout(self.config.timeout)
        request = self.client.build_request(
            "POST", url, content=body, headers=headers, timeout=timeout
        )
        response = await self.client.send(request, stream=True)  # the answer's body unread
        await response.aclose()
        return response.status_code

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run(), name="notifier")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        for task in list(self._inflight):
            task.cancel()  # its lease expires and another pass sends it again
        await asyncio.gather(*list(self._inflight), return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.pass_once()
                wait = await asyncio.to_thread(self._until_due)
            except Exception:
                log.exception("notifier pass failed; trying again")
                wait = self.config.poll
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), wait)

    def _until_due(self) -> float:
        """Seconds to the next pass: the poll, or sooner when a retry falls due (never
        under half a second: a row another replica holds stays due until it is sent)."""
        if len(self._inflight) >= self.config.concurrency:
            return self.config.poll
        due = self.store.next_due()
        if due is None:
            return self.config.poll
        seconds = (due - self.store.now()).total_seconds()
        return max(0.5, min(self.config.poll, seconds))


def build_notifications(store: StoreBase) -> tuple[NotificationsStore, Notifier]:
    """The notification store over the server's engine and this server's notifier
    (started by the web app's lifespan)."""
    notifications = NotificationsStore(store.engine, clock=store.clock)
    return notifications, Notifier(notifications)
