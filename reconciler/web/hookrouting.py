"""Which sources a webhook delivery is for, and with which secrets it may be proven.

`webhook_keys` reads the sources (the store's units of work) and what each one's secret
reference points at (a source without one uses the server's `--webhook-secret`), per
delivery, so a source added or a secret changed counts at once. The webhook checks the
delivery's signature or token against every distinct secret *before* it reads anything
of the body (`reconciler.web.webhooks`); `targets_for` then finds the sources of the
delivery's repository among those whose own secret proved it (`core.sources.
route_delivery`): a delivery for repo A signed with repo B's secret reaches nothing, and
a repository no source names is ignored, never fetched. A server with no source at all
(no `--repo`, no sources) keeps the behaviour before sources: the delivery is for
`--project` on `--branch`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import anyio.to_thread
from fastapi import Request

from reconciler.adapters.db.sources import SourcesStore
from reconciler.adapters.secretrefs import read_ref
from reconciler.core.sources import delivery_repositories, route_delivery
from reconciler.domain.sources import Source
from reconciler.web.context import WebContext
from reconciler.web.hookparsing import PayloadError, load_object


def sources_store(request: Request, context: WebContext) -> SourcesStore:
    """The store's sources units of work over the app's engine (made once per app)."""
    found = getattr(request.app.state, "sources_store", None)
    if not isinstance(found, SourcesStore):
        found = SourcesStore(context.db.engine, clock=context.clock)
        request.app.state.sources_store = found
    return found


@dataclass(frozen=True, slots=True)
class WebhookKeys:
    sources: tuple[Source, ...]
    server: str | None
    """The server's `--webhook-secret`."""
    by_source: dict[str, str]
    """Each source's secret (by name); a source whose reference cannot be read has none."""

    @property
    def values(self) -> list[str]:
        """The distinct secrets a delivery is checked against."""
        found = [self.server] if self.server else []
        return list(dict.fromkeys([*found, *self.by_source.values()]))


@dataclass(frozen=True, slots=True)
class Target:
    project: str
    branch: str


def _read_keys(store: SourcesStore, server: str | None) -> WebhookKeys:
    sources = tuple(store.list_sources())
    by_source: dict[str, str] = {}
    for source in sources:
        ref = source.webhook_secret_ref
        value = read_ref(ref, os.environ) if ref is not None else server
        if value:
            by_source[source.name] = value
    return WebhookKeys(sources, server, by_source)


async def webhook_keys(request: Request, context: WebContext) -> WebhookKeys:
    secret = context.settings.webhook_secret
    server = secret.get_secret_value() if secret is not None else None
    store = sources_store(request, context)
    return await anyio.to_thread.run_sync(_read_keys, store, server)


def targets_for(
    context: WebContext, keys: WebhookKeys, proved: set[str], provider: str, body: bytes
) -> tuple[list[Target], str | None]:
    """The projects and branches a proven delivery is for, or (none, why)."""
    settings = context.settings
    if not keys.sources:
        return [Target(settings.project, settings.branch)], None
    try:
        payload = load_object(body)
    except PayloadError:
        payload = {}
    names = {name for name, value in keys.by_source.items() if value in proved}
    server_proved = keys.server is not None and keys.server in proved
    repositories = delivery_repositories(provider, payload)
    routed, why = route_delivery(keys.sources, names, server_proved, repositories)
    return [Target(s.project, s.branch) for s in routed], why
