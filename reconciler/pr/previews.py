"""Preview runs of pull requests, the server side: webhooks in, host checks, the comment,
and the background sweep (docs/previews.md).

Built by the composition root (`reconciler.app`) when the server has a GitHub or GitLab
token; the webhooks hand it every verified first-time delivery (`accept`). Work runs in
background tasks (the webhook is answered at once), one pull request at a time.

Trust: the payload only names the pull request. The PR's state, head, labels and fork
status, who added the `dockyard:preview` label (the PR's label events) and whether that
person — or the author of a `/dockyard preview` comment, read back by id — has write
access are the host API's word. A fork's new commits are never deployed by a push: a
maintainer asks again. The preview's limits are the deployed `.dockyard.yml`'s
(`policy_rules`, the project's last applied revision), never the PR head's, so a PR cannot
raise its own budget. A `/dockyard preview` that does not count (no write access, a closed
PR) is answered on the PR with one short comment (`approving.refusal`), never a command.

The sweep (`sweep_once`, every `interval` seconds while the server runs, on one replica at
a time through `engine.previewruns`): TTLs, teardown after a restart, and for each live
preview a check of the PR (closed, merged or unlabeled while no webhook came) and an
update of the comment when its runs changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reconciler.adapters.db.store import Store
from reconciler.core.policy import PolicyRules
from reconciler.core.previewruns import (
    COMMAND,
    LABEL,
    MARKER,
    is_preview_command,
    render_section,
)
from reconciler.domain.previewruns import PreviewRun, PreviewState, PullRef
from reconciler.engine.previewruns import PreviewRuns
from reconciler.errors import DockyardError
from reconciler.pr.approving import refusal
from reconciler.pr.previewhooks import PreviewHint, github_hint, gitlab_hint
from reconciler.pr.previewhosts import (
    GitHubPreviewHost,
    GitLabPreviewHost,
    PreviewHost,
    PullInfo,
)
from reconciler.pr.reviewing import load_files, wanted_path
from reconciler.settings import Settings
from schemas import parse_config

log = logging.getLogger(__name__)

BUSY_INTERVAL = 2.0
"""Seconds between two sweeps while a preview is being torn down (its project goes as soon
as its runs have stopped) or its runs are coming up (the comment follows their status)."""
_REMEMBERED = 1_000
"""How many PRs' last comment the bot remembers (to edit a comment only when it changed)."""
_COMING_UP = frozenset({"pending", "submitted", "provisioning", "pulling", "running"})

PreviewHosts = Mapping[str, Callable[[str], PreviewHost]]
"""provider (`github`, `gitlab`) → opens the host API for a repository."""


@dataclass(frozen=True, slots=True)
class PreviewConfig:
    project: str
    """The config repo's project: members, budget, the preview project's name."""
    external_url: str
    """Where people reach the server (service URLs in the comment)."""
    subdir: str = ""
    interval: float = 30.0
    """Seconds between two sweeps."""


class PreviewBot:
    """See the module docstring. `rules(project)` is the deployed repo policy."""

    def __init__(
        self,
        runs: PreviewRuns,
        hosts: PreviewHosts,
        config: PreviewConfig,
        rules: Callable[[str], PolicyRules],
    ) -> None:
        self.runs = runs
        self.hosts = hosts
        self.config = config
        self.rules = rules
        self._locks: dict[PullRef, asyncio.Lock] = {}
        self._posted: dict[PullRef, str] = {}
        self._unsettled: set[PullRef] = set()
        """Previews whose runs are still coming up: the sweep looks again soon."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop the bot's work runs on (set by `start`)."""

    # -- webhooks --------------------------------------------------------------------------

    def accept(self, provider: str, event: str, body: bytes) -> tuple[bool, str]:
        """Start on a delivery that concerns a preview; (started, why)."""
        if provider not in self.hosts:
            return False, f"no {provider} token: previews are off for it"
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return False, "the body is not JSON"
        if not isinstance(payload, dict):
            return False, "the body is not a JSON object"
        read = github_hint if provider == "github" else gitlab_hint
        hint = read(event, payload)
        if isinstance(hint, str):
            return False, hint
        self._spawn(self.consider(hint))
        return True, f"preview runs: {hint.cause} on #{hint.pull.number}"

    async def consider(self, hint: PreviewHint) -> None:
        """Act on a hint: deploy, redeploy, tear down or nothing (see the module docstring)."""
        lock = self._locks.setdefault(hint.pull, asyncio.Lock())
        async with lock:
            host = await asyncio.to_thread(self.hosts[hint.pull.provider], hint.pull.repo)
            try:
                done = await self._consider(host, hint)
                log.info("preview runs of %s#%s: %s", hint.pull.repo, hint.pull.number, done)
            except DockyardError as exc:
                log.warning(
                    "preview runs of %s#%s failed: %s", hint.pull.repo, hint.pull.number, exc
                )
            finally:
                await asyncio.to_thread(host.close)

    async def _consider(self, host: PreviewHost, hint: PreviewHint) -> str:
        pull, number = hint.pull, hint.pull.number
        info = await asyncio.to_thread(host.pull_info, number)
        if hint.cause == "comment":
            return await self._asked(host, hint, info)
        if info.state != "open":
            return await self._teardown(host, pull, f"the pull request was {info.state}")
        if hint.cause == "unlabel" and LABEL not in info.labels:
            return await self._teardown(host, pull, f"the `{LABEL}` label was removed")
        old = await asyncio.to_thread(self.runs.previews.get_preview, pull)
        who: str | None = None
        trigger = "label"
        if hint.cause in ("label", "reopened") and LABEL in info.labels:
            who = await asyncio.to_thread(host.label_actor, number, LABEL)
        elif hint.cause == "push" and old is not None and old.state is PreviewState.ACTIVE:
            if info.fork:
                return await self._fork_push(host, old, info.head)
            who, trigger = old.requested_by, old.trigger
        if who is None:
            return f"nothing to do ({hint.cause})"
        if not await asyncio.to_thread(host.can_write, who):
            return f"{who} has no write access: no preview"
        return await self._deploy(host, pull, info.head, who, trigger, info.fork)

    async def _asked(self, host: PreviewHost, hint: PreviewHint, info: PullInfo) -> str:
        """A `/dockyard preview` comment, read back by id: deploy, or answer on the PR with
        one short comment saying who asked and why it did not count (`approving.refusal`).
        The bot's own comments (the preview comment, the answers) are never requests."""
        pull, number = hint.pull, hint.pull.number
        if hint.comment_id is None:
            return "nothing to do (a comment without an id)"
        comment = await asyncio.to_thread(host.read_comment, number, hint.comment_id)
        if MARKER in comment.body or not is_preview_command(comment.body):
            return "the comment is not a request"
        who = comment.author
        if info.state != "open":
            done = await self._teardown(host, pull, f"the pull request was {info.state}")
            why = f"the pull request is {info.state}"
        elif not await asyncio.to_thread(host.can_write, who):
            done, why = "no preview", f"{who} has no write access to {pull.repo}"
            if info.fork:
                why += " (a pull request from a fork is previewed when a maintainer asks)"
        else:
            return await self._deploy(host, pull, info.head, who, "comment", info.fork)
        await asyncio.to_thread(host.create_comment, number, refusal(who, why, COMMAND))
        return f"{done}; answered {who}: {why}"

    async def _deploy(
        self, host: PreviewHost, pull: PullRef, head: str, who: str, trigger: str, fork: bool
    ) -> str:
        files = await asyncio.to_thread(host.read_files, head, wanted_path(self.config.subdir))
        loaded = load_files(files, commit=head, parse=parse_config, subdir=self.config.subdir)
        rules = await asyncio.to_thread(self.rules, self.config.project)
        preview = await asyncio.to_thread(
            lambda: self.runs.deploy(
                pull,
                project=self.config.project,
                head=head,
                desired=loaded.desired,
                rules=rules,
                requested_by=who,
                trigger=trigger,
                fork=fork,
            )
        )
        await self._post(host, preview)
        return f"{preview.state.value} at {head[:12]} for {who}"

    async def _fork_push(self, host: PreviewHost, old: PreviewRun, head: str) -> str:
        if old.head == head:
            return "the head did not change"
        note = (
            f"new commits of this fork (`{head[:12]}`) are not deployed: a maintainer "
            f"comments `/dockyard preview` or adds the `{LABEL}` label again"
        )
        notes = tuple(n for n in old.notes if "are not deployed: a maintainer" not in n)
        saved = await asyncio.to_thread(
            self.runs.previews.save_preview, replace(old, notes=(*notes, note))
        )
        await self._post(host, saved)
        return "a fork's push: not deployed"

    async def _teardown(self, host: PreviewHost, pull: PullRef, reason: str) -> str:
        preview = await asyncio.to_thread(self.runs.teardown, pull, reason)
        if preview is None:
            return f"no preview to tear down ({reason})"
        await self._post(host, preview)
        return f"torn down: {reason}"

    # -- the comment -----------------------------------------------------------------------

    async def _post(self, host: PreviewHost, preview: PreviewRun) -> None:
        """Upsert the preview comment when what it says changed."""
        name = preview.preview_project
        statuses = await asyncio.to_thread(self.runs.previews.preview_statuses, name)
        body = render_section(
            preview, statuses, base_url=self.config.external_url, now=self.runs.now()
        )
        settled = all(s.ready or s.status not in _COMING_UP for s in statuses)
        if (preview.state is PreviewState.ACTIVE and not settled) or (
            preview.state is PreviewState.STOPPING
        ):
            self._unsettled.add(preview.pull)
            self._wake.set()
        else:
            self._unsettled.discard(preview.pull)
        if self._posted.get(preview.pull) == _stable(body):
            return
        number = preview.pull.number

        def upsert() -> None:
            existing = host.find_comment(number, MARKER)
            if existing is None:
                host.create_comment(number, body)
            else:
                host.update_comment(number, existing.id, body)

        await asyncio.to_thread(upsert)
        if len(self._posted) >= _REMEMBERED:  # bounded: forget, and post once more later
            self._posted.clear()
        self._posted[preview.pull] = _stable(body)

    # -- the sweep -------------------------------------------------------------------------

    async def sweep_once(self) -> list[PreviewRun]:
        """One pass (see the module docstring); the previews it looked at."""
        swept = await asyncio.to_thread(self.runs.sweep_once)
        for preview in swept or ():
            if preview.pull.provider not in self.hosts:
                continue
            lock = self._locks.setdefault(preview.pull, asyncio.Lock())
            async with lock:
                await self._check(preview)
        return list(swept or ())

    async def _check(self, preview: PreviewRun) -> None:
        host = await asyncio.to_thread(self.hosts[preview.pull.provider], preview.pull.repo)
        try:
            if preview.state is PreviewState.ACTIVE:
                info = await asyncio.to_thread(host.pull_info, preview.pull.number)
                if info.state != "open":
                    await self._teardown(host, preview.pull, f"the pull request was {info.state}")
                    return
                if preview.trigger == "label" and LABEL not in info.labels:
                    await self._teardown(host, preview.pull, f"the `{LABEL}` label was removed")
                    return
            await self._post(host, preview)
        except DockyardError as exc:
            log.warning(
                "checking the preview of %s#%s: %s", preview.pull.repo, preview.pull.number, exc
            )
        finally:
            await asyncio.to_thread(host.close)

    async def _run(self) -> None:
        while not self._stop.is_set():
            swept: list[PreviewRun] = []
            try:
                swept = await self.sweep_once()
            except Exception:  # the loop outlives one bad pass
                log.exception("the preview runs sweep failed")
            stopping = any(p.state is PreviewState.STOPPING for p in swept)
            busy = stopping or bool(self._unsettled)
            if busy:
                self._wake.clear()  # a pass comes soon anyway
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._wake.wait(), timeout=BUSY_INTERVAL if busy else self.config.interval
                )
            self._wake.clear()

    async def start(self) -> None:
        """Start the sweep loop (the app's lifespan)."""
        self._stop.clear()
        self.runs.stopping.clear()
        log.info("preview runs: sweeping every %gs", self.config.interval)
        self.loop = asyncio.get_running_loop()
        self._loop = self.loop.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.runs.stopping.set()
        if self._loop is not None:
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        await self.drain()
        log.info("preview runs: sweep stopped")

    # -- tasks -----------------------------------------------------------------------------

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the background work started so far (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _stable(body: str) -> str:
    """The comment without what changes every minute (the cost so far), so the comment is
    edited when a status changes, and the cost is refreshed with it."""
    return "\n".join(line.split(" | $")[0] for line in body.splitlines())


def build_previews(settings: Settings, store: Store, controller: object) -> PreviewBot | None:
    """The preview bot of a server with a GitHub and/or GitLab token, else None; the
    controller gives the deployed repo policy (`policy_rules`) and wakes workers (`hint`)."""
    hosts: dict[str, Callable[[str], PreviewHost]] = {}
    if settings.github_token is not None:
        github_token = settings.github_token.get_secret_value()
        github_api = settings.github_api_url

        def github(repo: str) -> PreviewHost:
            return GitHubPreviewHost(repo, token=github_token, api_url=github_api)

        hosts["github"] = github
    if settings.gitlab_token is not None:
        gitlab_token = settings.gitlab_token.get_secret_value()
        gitlab_api = settings.gitlab_api_url

        def gitlab(repo: str) -> PreviewHost:
            return GitLabPreviewHost(repo, token=gitlab_token, api_url=gitlab_api)

        hosts["gitlab"] = gitlab
    if not hosts:
        return None
    policy_rules = getattr(controller, "policy_rules", None)
    hint = getattr(controller, "hint", None)

    def rules(project: str) -> PolicyRules:
        found = policy_rules(project) if callable(policy_rules) else None
        return found if isinstance(found, PolicyRules) else PolicyRules()

    runs = PreviewRuns(store, hint=hint if callable(hint) else (lambda kind: None))
    config = PreviewConfig(
        project=settings.project,
        external_url=settings.external_url or settings.public_url,
        subdir=settings.path.strip("/"),
    )
    return PreviewBot(runs, hosts, config, rules)
