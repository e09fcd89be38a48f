"""The PR bots of the stored sources: each source's pull requests (GitHub) and merge
requests (GitLab) planned, commented and approved as that source's own.

Built once by the composition root (`reconciler.app.build_engine`); the webhooks ask it
for the bot of a source a verified delivery was routed to (`reconciler.web.hooks_sourceprs`).
A source's bot plans against the source's project and directory (`paths`), posts the
comment under its own marker (`<!-- dockyard:plan NAME -->`) and the status
`dockyard/NAME/plan`, so two sources of one monorepo each post their own; whose
`/dockyard approve` counts is read from that source's deployed `.dockyard.yml` (its last
applied revision in its own mirror, `engine.deployedpolicy.rules_by_project`).

The token it posts with is the source's own: the token its `credentials` reference names
(an HTTPS token, `env:NAME` or `file:PATH`), read when the host is opened, so a token
changed in the environment file or on disk is used at once. A source with an SSH key or
no credentials has no token to post with: its pull requests are not planned, and the
server log says so once per source and host (never the token).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Mapping
from typing import Literal

from reconciler.adapters.db.store import Store
from reconciler.adapters.gitsource.remotes import RepoLocation
from reconciler.adapters.secretrefs import read_ref
from reconciler.domain.sources import Source
from reconciler.engine.deployedpolicy import RulesAt, no_rules
from reconciler.engine.previewing import Previewer
from reconciler.errors import UsageError
from reconciler.pr.bot import BotConfig, PullRequestBot, page_key
from reconciler.pr.github import GitHub
from reconciler.pr.gitlab import GitLab
from reconciler.pr.hosting import CodeHost
from reconciler.settings import Settings
from stacks.catalog import CatalogRow, load_catalog

log = logging.getLogger(__name__)

Provider = Literal["github", "gitlab"]


def source_context(source: Source) -> str:
    """The commit status context of a source's PR plans."""
    return f"dockyard/{source.name}/plan"


def api_token(source: Source, environ: Mapping[str, str]) -> str | None:
    """The token a source posts with: what its `credentials` name for an HTTPS (or local)
    repo; None for an SSH repo (the reference is a key) or a source without credentials."""
    ref = source.credentials_ref
    if ref is None or RepoLocation(source.repo).scheme == "ssh":
        return None
    return read_ref(ref, environ)


class SourceBots:
    """One `PullRequestBot` per (source, host), made at its first delivery."""

    def __init__(
        self, store: Store, settings: Settings, environ: Mapping[str, str], page_secret: str
    ) -> None:
        self._store = store
        self._settings = settings
        self._environ = environ
        self._page_key = page_key(page_secret)
        self._bots: dict[tuple[Source, Provider], PullRequestBot] = {}
        self._told: set[tuple[str, Provider]] = set()
        self._lock = threading.Lock()
        self._catalog: tuple[CatalogRow, ...] | None = None  # loaded with the first bot
        self.previewer: Previewer | None = None
        """The runtime's stack previewer (set by the composition root, as the `--repo`
        bot's)."""
        self.deployed: RulesAt = no_rules
        """Each project's deployed rules (`deployedpolicy.rules_by_project`)."""

    def bot(self, source: Source, provider: Provider) -> PullRequestBot | None:
        """The bot posting for `source` on `provider`, or None (no token: said once)."""
        if api_token(source, self._environ) is None:
            with self._lock:
                first = (source.name, provider) not in self._told
                self._told.add((source.name, provider))
            if first:
                log.warning(
                    "source %s has no API token to post pull request plans with (its "
                    "credentials name no HTTPS token): its %s pull requests are not planned",
                    source.name,
                    provider,
                )
            return None
        with self._lock:
            found = self._bots.get((source, provider))
            if found is None:
                found = self._build(source, provider)
                self._bots[(source, provider)] = found
            return found

    def _build(self, source: Source, provider: Provider) -> PullRequestBot:
        settings, environ = self._settings, self._environ

        def hosts(repo: str) -> CodeHost:
            token = api_token(source, environ)
            if token is None:
                raise UsageError(f"source {source.name} has no API token to post with")
            if provider == "github":
                return GitHub(repo, token=token, api_url=settings.github_api_url)
            return GitLab(repo, token=token, api_url=settings.gitlab_api_url)

        config = BotConfig(
            project=source.project,
            external_url=settings.external_url or settings.public_url,
            page_key=self._page_key,
            subdir=source.subdir.strip("/"),
            job_users=settings.job_user_rule(),
            key=source.name,
            plan_context=source_context(source),
            default_project=source.project,
        )
        if self._catalog is None:
            self._catalog = tuple(load_catalog())
        bot = PullRequestBot(self._store, hosts, config, catalog=self._catalog)
        bot.previewer, bot.deployed = self.previewer, self.deployed
        return bot

    async def drain(self) -> None:
        """Wait for every bot's background work started so far (tests, shutdown)."""
        with self._lock:
            bots = list(self._bots.values())
        for bot in bots:
            await bot.drain()


def build_source_bots(settings: Settings, store: Store) -> SourceBots:
    """The stored sources' PR bots (the composition root's): tokens from the process
    environment or files, page links signed with the server's webhook secret."""
    secret = settings.webhook_secret
    page_secret = secret.get_secret_value() if secret is not None else secrets.token_hex(32)
    return SourceBots(store, settings, os.environ, page_secret)
