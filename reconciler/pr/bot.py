"""The server posting by itself, like Atlantis: PR plans on webhooks, apply statuses.

Built by the composition root when the server has a GitHub token
(`DOCKYARD_GITHUB_TOKEN`); with a GitLab token (`DOCKYARD_GITLAB_TOKEN`) a second one over
GitLab answers `/dockyard approve` notes of merge requests. It
- plans a `pull_request` delivery (opened, synchronize, reopened): reads the head's config
  files through the host's API (a fork's PR head lives in the base repository), plans them
  against the live state with the reconcile's plan function (stack previews, blocked
  actions, drift) and prices, and upserts the comment and `dockyard/plan`;
- sets `dockyard/apply` pending when a push queues a reconcile, linking the commit's page;
- is the engine's `Reporter`: when the reconcile ends, `dockyard/apply` becomes success or
  failure with `target_url` = that reconcile's page; a pass that applied everything it
  could but left actions blocked is a failure saying "applied N, blocked M: …" (a person
  must act: install the Pulumi CLI, add credentials, fix the backend). A status is posted
  only when it changes (the periodic reconcile of the same commit does not post it again).

A stored source's bot (`reconciler.pr.sourcebots`) is the same class with that source's
project, directory, token, comment marker and status context; it also plans GitLab
`Merge Request Hook` deliveries (`accept_merge_request`).

Work runs in background tasks (the webhook is answered at once); host failures are logged
as their one-line message, never with the token.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from reconciler.adapters.db.store import Store
from reconciler.core.jobusers import JobUserRule
from reconciler.core.reconcile_status import ReconcileStatus
from reconciler.engine.deployedpolicy import RulesAt, no_rules
from reconciler.engine.previewing import Previewer
from reconciler.errors import DockyardError
from reconciler.pr.approvalhooks import github_comment_request, gitlab_note_request
from reconciler.pr.approving import COMMAND as APPROVE_COMMAND
from reconciler.pr.approving import ApprovalRequest, approve
from reconciler.pr.commenting import APPLY_CONTEXT, PLAN_CONTEXT
from reconciler.pr.document import read_report
from reconciler.pr.github import GitHub
from reconciler.pr.gitlab import GitLab
from reconciler.pr.hosting import CodeHost, CommitStatus, StatusState
from reconciler.pr.liveplan import plan_files
from reconciler.pr.posting import post_plan
from reconciler.pr.reviewing import wanted_path
from reconciler.settings import Settings
from stacks.catalog import CatalogRow, load_catalog

log = logging.getLogger(__name__)

HostFactory = Callable[[str], CodeHost]
"""Opens the host API for a repository (`owner/name`)."""

PLANNED_ACTIONS = frozenset({"opened", "synchronize", "reopened"})
MERGE_REQUEST_ACTIONS = frozenset({"open", "update", "reopen"})
_REMEMBERED = 1_000
"""How many (commit, context) statuses the bot remembers, so as not to post them again."""


class Report(Protocol):
    """What the engine reports when a reconcile ends (`reconciler.engine.reconciling.Report`)."""

    @property
    def reconcile_id(self) -> str: ...
    @property
    def commit(self) -> str | None: ...
    @property
    def status(self) -> ReconcileStatus: ...
    @property
    def error(self) -> str | None: ...
    @property
    def plan(self) -> Mapping[str, Any] | None: ...
    @property
    def summary(self) -> str | None: ...
    @property
    def blocked(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class BotConfig:
    project: str
    external_url: str
    """Where people reach the server (status links)."""
    page_key: bytes
    """Signs page links, so a page opens from a status without a bearer token."""
    repo: str | None = None
    """`owner/name` the apply statuses go to (None: no apply statuses)."""
    subdir: str = ""
    job_users: JobUserRule | None = None
    """The server's rule for a process job's `user:` (`core.jobusers`; None: not checked)."""
    key: str = ""
    """The plan comment's marker key (`commenting.marker`): a source's bot posts its own
    comment beside another source's on one monorepo PR ("" for the `--repo` bot)."""
    plan_context: str = PLAN_CONTEXT
    """The PR plan's commit status context (`dockyard/<source>/plan` for a source's bot)."""
    default_project: str | None = None
    """The project when a PR's `.dockyard.yml` names none (a source's; None: `main`)."""


def sign(key: bytes, subject: str) -> str:
    return hmac.new(key, subject.encode(), hashlib.sha256).hexdigest()[:32]


def page_key(secret: str) -> bytes:
    """The key of page signatures, derived from a server secret."""
    return hmac.new(secret.encode(), b"dockyard-pages", hashlib.sha256).digest()


class PullRequestBot:
    """See the module docstring."""

    def __init__(
        self,
        store: Store,
        hosts: HostFactory,
        config: BotConfig,
        *,
        catalog: Sequence[CatalogRow] | None = None,
    ) -> None:
        self._store = store
        self._hosts = hosts
        self.config = config
        self.catalog = tuple(catalog) if catalog is not None else load_catalog()
        """The offers catalog PR plans price runs with (loaded once, when the bot is built
        at server start; default: the bundled one)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._posted: OrderedDict[tuple[str, str], str] = OrderedDict()
        self.previewer: Previewer | None = None
        """The runtime's stack previewer, set by the composition root once it is built
        (None: a runtime without engines; PR plans then say previews were not checked)."""
        self.deployed: RulesAt = no_rules
        """The repo policy at a revision, read from the server's config repo (set by the
        composition root): whose `/dockyard approve` counts comes from the deployed
        `.dockyard.yml`, never the PR head's (`engine.deployedpolicy`). Default: nobody."""

    # -- links ------------------------------------------------------------------------------

    def page_url(self, kind: str, ident: str) -> str:
        """The signed link to `/pages/{kind}/{ident}` (kind: reconciles | commits)."""
        base = self.config.external_url.rstrip("/")
        return f"{base}/pages/{kind}/{ident}?sig={sign(self.config.page_key, f'{kind}/{ident}')}"

    def is_signed(self, kind: str, ident: str, signature: str | None) -> bool:
        expected = sign(self.config.page_key, f"{kind}/{ident}")
        return signature is not None and hmac.compare_digest(expected, signature)

    # -- pull requests ----------------------------------------------------------------------

    def accept_pull_request(self, payload: Mapping[str, Any]) -> tuple[bool, str]:
        """Start planning the PR of a `pull_request` delivery; (started, why)."""
        action = payload.get("action")
        pull = payload.get("pull_request")
        repo = (payload.get("repository") or {}).get("full_name")
        if action not in PLANNED_ACTIONS:
            return False, f"pull_request {action!r} is not planned (opened, synchronize, reopened)"
        if not isinstance(pull, Mapping) or not isinstance(repo, str):
            return False, "the delivery has no pull_request or repository"
        number = pull.get("number") or payload.get("number")
        sha = (pull.get("head") or {}).get("sha")
        if not isinstance(number, int) or not isinstance(sha, str):
            return False, "the delivery has no PR number or head SHA"
        self._spawn(self._plan_pull_request(repo, number, sha))
        return True, f"planning pull request #{number} at {sha[:12]}"

    def accept_merge_request(self, payload: Mapping[str, Any]) -> tuple[bool, str]:
        """The same for a GitLab `Merge Request Hook` (open, update, reopen)."""
        attrs = payload.get("object_attributes")
        repo = (payload.get("project") or {}).get("path_with_namespace")
        if not isinstance(attrs, Mapping) or not isinstance(repo, str):
            return False, "the delivery has no merge request or project"
        action = attrs.get("action")
        if action not in MERGE_REQUEST_ACTIONS:
            return False, f"merge request {action!r} is not planned (open, update, reopen)"
        number, last = attrs.get("iid"), attrs.get("last_commit")
        sha = last.get("id") if isinstance(last, Mapping) else None
        if not isinstance(number, int) or not isinstance(sha, str) or not sha:
            return False, "the delivery has no merge request iid or last commit"
        self._spawn(self._plan_pull_request(repo, number, sha))
        return True, f"planning merge request !{number} at {sha[:12]}"

    async def _plan_pull_request(self, repo: str, number: int, sha: str) -> None:
        """Plan the PR head (the reconcile's plan function, previews included) and post the
        comment and status."""
        host = await asyncio.to_thread(self._hosts, repo)
        try:
            files = await asyncio.to_thread(host.read_files, sha, wanted_path(self.config.subdir))
            tree = await asyncio.to_thread(_tree_or_none, host, sha)
            report = await plan_files(
                self._store,
                self.config.project,
                files,
                commit=sha,
                subdir=self.config.subdir,
                previewer=self.previewer,
                catalog=self.catalog,
                tree=tree,
                deployed=self.deployed,
                job_users=self.config.job_users,
                default_project=self.config.default_project,
            )
            key, context = self.config.key, self.config.plan_context
            await asyncio.to_thread(
                post_plan, host, number, report, sha=sha, key=key, context=context
            )
        except DockyardError as exc:
            log.warning("planning pull request %s#%s failed: %s", repo, number, exc)
            text = f"cannot plan: {exc}"[:140]
            status = CommitStatus(StatusState.ERROR, self.config.plan_context, text)
            await asyncio.to_thread(self._status_quietly, host, sha, status)
        finally:
            await asyncio.to_thread(host.close)

    def accept_issue_comment(self, payload: Mapping[str, Any]) -> tuple[bool, str]:
        """Start checking an `issue_comment` on a pull request that may be `/dockyard
        approve` (`approving`: the comment is read back from the API); (started, why)."""
        request = github_comment_request(payload, self.config.project, self.config.subdir)
        return self._start_approval(request)

    def accept_note(self, payload: Mapping[str, Any]) -> tuple[bool, str]:
        """The same for a GitLab `Note Hook` (a note on a merge request); (started, why)."""
        request = gitlab_note_request(payload, self.config.project, self.config.subdir)
        return self._start_approval(request)

    def _start_approval(self, request: ApprovalRequest | str) -> tuple[bool, str]:
        if isinstance(request, str):
            return False, request
        config = self.config
        request = replace(
            request,
            key=config.key,
            context=config.plan_context,
            default_project=config.default_project,
        )
        self._spawn(self._approve(request))
        return True, f"checking {APPROVE_COMMAND} on #{request.number}"

    async def _approve(self, request: ApprovalRequest) -> None:
        host = await asyncio.to_thread(self._hosts, request.repo)
        try:
            done = await approve(
                self._store, host, request, self.previewer, self.catalog, self.deployed
            )
            log.info("pull request %s#%s: %s", request.repo, request.number, done.text)
        except DockyardError as exc:
            log.warning("approving on %s#%s failed: %s", request.repo, request.number, exc)
        finally:
            await asyncio.to_thread(host.close)

    # -- apply statuses ---------------------------------------------------------------------

    def apply_pending(self, sha: str | None) -> None:
        """A push queued a reconcile of `sha`: `dockyard/apply` pending."""
        if sha and self.config.repo:
            status = CommitStatus(
                StatusState.PENDING,
                APPLY_CONTEXT,
                "reconcile queued",
                self.page_url("commits", sha),
            )
            self._spawn(self._post_status(sha, status))

    async def report(self, report: Report) -> None:
        """The engine's `Reporter`: `dockyard/apply` success or failure for the commit."""
        if not report.commit or not self.config.repo:
            return
        await self._post_status(report.commit, apply_status(report, self))

    async def _post_status(self, sha: str, status: CommitStatus) -> None:
        key = (sha, status.context)
        if self._posted.get(key) == status.state.value + status.description:
            return
        self._posted[key] = status.state.value + status.description
        while len(self._posted) > _REMEMBERED:
            self._posted.popitem(last=False)
        repo = self.config.repo
        assert repo is not None

        def post() -> None:
            host = self._hosts(repo)
            try:
                self._status_quietly(host, sha, status)
            finally:
                host.close()

        await asyncio.to_thread(post)

    @staticmethod
    def _status_quietly(host: CodeHost, sha: str, status: CommitStatus) -> None:
        try:
            host.set_status(sha, status)
        except DockyardError as exc:
            log.warning("setting %s on %s failed: %s", status.context, sha[:12], exc)

    # -- tasks ------------------------------------------------------------------------------

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the background work started so far (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _tree_or_none(host: CodeHost, sha: str) -> str | None:
    """The head's tree, whose approvals count; None (no approval counts) when the host
    cannot say it."""
    try:
        return host.commit_tree(sha)
    except DockyardError as exc:
        log.info("no approvals for %s: %s", sha[:12], exc)
        return None


def apply_status(report: Report, bot: PullRequestBot) -> CommitStatus:
    """`dockyard/apply` for a finished reconcile: success, failure, or error (aborted)."""
    url = bot.page_url("reconciles", report.reconcile_id)
    if report.status is ReconcileStatus.SUCCEEDED and report.blocked:
        text = report.summary or f"blocked {len(report.blocked)}: see the reconcile page"
        return CommitStatus(StatusState.FAILURE, APPLY_CONTEXT, text[:140], url)
    if report.status is ReconcileStatus.SUCCEEDED:
        summary = read_report(report.plan).plan.summary if report.plan else {}
        changed = [f"{n} {kind}" for kind, n in summary.items() if n and kind != "noop"]
        counts = ", ".join(changed) or "no changes"
        return CommitStatus(StatusState.SUCCESS, APPLY_CONTEXT, f"applied: {counts}", url)
    state = StatusState.FAILURE if report.status is ReconcileStatus.FAILED else StatusState.ERROR
    text = f"{report.status.value}: {report.error or 'see the reconcile page'}"
    return CommitStatus(state, APPLY_CONTEXT, text[:140], url)


def github_repo_of(url: str | None) -> str | None:
    """`owner/name` of a github.com repo URL (https or SSH), else None."""
    if not url:
        return None
    prefixes = ("https://github.com/", "git@github.com:", "ssh://git@github.com/")
    for prefix in prefixes:
        if url.startswith(prefix):
            path = url[len(prefix) :].removesuffix("/").removesuffix(".git")
            return path if path.count("/") == 1 else None
    return None


def build_gitlab_bot(settings: Settings, store: Store) -> PullRequestBot | None:
    """The bot answering `/dockyard approve` notes on GitLab merge requests (the GitLab
    webhook's `Note Hook`) for a server with `DOCKYARD_GITLAB_TOKEN`, else None."""
    if settings.gitlab_token is None:
        return None
    token = settings.gitlab_token.get_secret_value()
    api_url = settings.gitlab_api_url

    def hosts(repo: str) -> CodeHost:
        return GitLab(repo, token=token, api_url=api_url)

    return PullRequestBot(store, hosts, _bot_config(settings, token))


def build_bot(settings: Settings, store: Store) -> PullRequestBot | None:
    """The bot for a server with `DOCKYARD_GITHUB_TOKEN`, else None."""
    if settings.github_token is None:
        return None
    token = settings.github_token.get_secret_value()
    api_url = settings.github_api_url

    def hosts(repo: str) -> CodeHost:
        return GitHub(repo, token=token, api_url=api_url)

    repo = settings.github_repo or github_repo_of(settings.repo)
    return PullRequestBot(store, hosts, _bot_config(settings, token, repo=repo))


def _bot_config(settings: Settings, token: str, *, repo: str | None = None) -> BotConfig:
    """What both hosts' bots share: the project, the page links and their key."""
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else token
    return BotConfig(
        project=settings.project,
        external_url=settings.external_url or settings.public_url,
        page_key=page_key(secret),
        repo=repo,
        subdir=settings.path.strip("/"),
        job_users=settings.job_user_rule(),
    )
