"""The composition root: Settings → Store → Controller → FastAPI app → uvicorn.

`build_server` opens the database (applying pending migrations), makes sure the admin user
and the default project exist (first start: writes `<data-dir>/admin-token` and, when the
CLI has no config yet, adds the project to it), builds the runtime `Controller` and the web
app. `serve` runs it under uvicorn; SIGINT/SIGTERM stop the server gracefully: the
controller's workers stop, jobs keep running on their hosts and are picked up again by the
next start.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from agent.client import AgentClient, AgentError
from agent.tunnel import AgentUnreachable, SSHTarget, UnreachableKind
from reconciler.adapters.backendsfile import load_server_backends
from reconciler.adapters.db import Store, resolve_db_url
from reconciler.adapters.db.readmodels.bootstrap import ensure_admin
from reconciler.adapters.db.readmodels.database import Database
from reconciler.adapters.db.replicas import check_database_for, this_server
from reconciler.adapters.db.secrets_crypto import SecretsCipher, load_or_create_key
from reconciler.adapters.sourcesfile import declared_sources, flags_source
from reconciler.core.clusterbackends import ServerBackends
from reconciler.domain.inventory import InstanceRecord
from reconciler.engine.deployedpolicy import RulesAt, rules_at, rules_by_project
from reconciler.engine.service_stats import RequestStats
from reconciler.ports import Controller
from reconciler.pr.bot import PullRequestBot, build_bot, build_gitlab_bot
from reconciler.pr.sourcebots import SourceBots, build_source_bots
from reconciler.settings import Settings

if TYPE_CHECKING:  # the web modules load in build_web: a start runs its runtime first
    from fastapi import FastAPI
    from starlette.types import ASGIApp

    from reconciler.web.forwarding import OpenTunnel

log = logging.getLogger("dockyard.server")

ControllerFactory = Callable[[Settings, Store], Controller]
FIRST_PASS_WAIT = 3.0
"""The longest a start waits for the runtime's first pass before it builds the web app."""


@dataclass(frozen=True, slots=True)
class Server:
    app: FastAPI
    store: Store
    settings: Settings
    admin_token: str | None
    cli_config_written: bool
    asgi: ASGIApp | None = None  # what uvicorn serves: `app`, service traffic sent first


def load_controller(
    settings: Settings,
    store: Store,
    stats: RequestStats,
    reporter: PullRequestBot | None = None,
    clusters: ServerBackends | None = None,
) -> Controller:
    """The runtime from `reconciler.engine` (`build_controller(settings, store, stats=)`)."""
    from reconciler.engine.controller import build_controller

    return build_controller(settings, store, stats=stats, reporter=reporter, clusters=clusters)


def build_tunnel_opener(controller: Controller) -> OpenTunnel | None:
    """`open(instance, port)` over the engine's SSH tunnel pool (None without one)."""
    agents = getattr(controller, "agents", None)
    pool = getattr(controller, "pool", None)
    if agents is None or pool is None:
        return None

    async def open_tunnel(instance: InstanceRecord, port: int) -> tuple[Any, Any]:
        target = agents.address(instance).target
        if instance.backend != "local":  # through the host's own sshd: ask its agent first
            await check_port_holder(agents.client(instance), target, port)
        return await pool.open_stream(target, "127.0.0.1", port)  # type: ignore[no-any-return]

    return open_tunnel


async def check_port_holder(client: AgentClient, target: SSHTarget, port: int) -> None:
    """Refuse (as a refused channel, `AgentUnreachable`) a forward to `port` of a host
    reached through its own sshd unless its agent says the job holds it; the local
    agent's SSH server checks its channels itself (`agent.server.portholders`)."""
    try:
        problem = await client.port_problem(port)
    except AgentError as exc:  # an agent too old to tell: not the job's, as far as known
        problem = f"port {port}: the host's agent cannot tell who holds it ({exc})"
    if problem is not None:
        raise AgentUnreachable(
            str(target), UnreachableKind.channel_refused, f"127.0.0.1:{port}: {problem}"
        )


def build_proxy(
    settings: Settings, controller: Controller, store: Store, db: Database, stats: RequestStats
) -> ASGIApp | None:
    """The service proxy over the engine's tunnel pool, or None for a runtime without one."""
    agents = getattr(controller, "agents", None)
    pool = getattr(controller, "pool", None)
    if agents is None or pool is None:
        return None
    from agent.local import local_agent_ssh_port
    from agent.server.portholders import PortHolders
    from reconciler.engine.routes import StoreRoutes
    from reconciler.web.auth import token_authorizer, token_recogniser
    from reconciler.web.jobnotes import JobNotes
    from reconciler.web.proxy import ServiceProxy

    return ServiceProxy(
        routes=StoreRoutes(
            store, agents, local_ssh_port=lambda: local_agent_ssh_port(settings.data_dir)
        ),
        pool=pool,
        authorize=token_authorizer(db),
        is_dockyard_token=token_recogniser(db),
        stats=stats,
        # the local fleet's replicas are dialled on loopback: only while the job holds the
        # port (through a tunnel, the agent checks it)
        port_check=PortHolders().problem,
        notes=JobNotes(db),
    )


def _first_start(settings: Settings, db: Database) -> tuple[str | None, bool]:
    now = datetime.now(UTC)
    token = db.write_now(ensure_admin, settings.project, settings.admin_token_path, now)
    if token is None:  # not a first start
        return token, False
    # the CLI's config (reconciler.api, with its client): loaded on a first start only
    from reconciler.api.config import ProjectConfig, add_project, load_projects

    if load_projects(settings.cli_config):
        return token, False
    project = ProjectConfig(settings.project, settings.public_url, token, True)
    add_project(settings.cli_config, project, make_default=True)
    return token, True


@dataclass(frozen=True, slots=True)
class ServerRuntime:
    """What the server runs before any web part: the store, the runtime and what the web
    app is built over (`build_web`)."""

    settings: Settings
    store: Store
    db: Database
    controller: Controller
    stats: RequestStats
    clusters: ServerBackends | None
    deployed: RulesAt
    bot: PullRequestBot | None
    notes: PullRequestBot | None
    admin_token: str | None
    cli_config_written: bool
    source_bots: SourceBots | None = None


def build_server(
    settings: Settings, *, controller_factory: ControllerFactory | None = None
) -> Server:
    return build_web(build_engine(settings, controller_factory=controller_factory))


def build_engine(
    settings: Settings, *, controller_factory: ControllerFactory | None = None
) -> ServerRuntime:
    """The store (migrated) and the runtime, not started; `serve_engine_first` starts it
    before the web app is built."""
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    settings.data_dir.chmod(0o700)  # admin token, database, secrets key: the server's only
    # the clusters projects may use: a bad backends file stops the start (file:line errors)
    clusters = load_server_backends(
        settings.backends_config, settings.data_dir, settings.dstack_server_config
    )
    db_url = resolve_db_url(settings.db, settings.data_dir)
    check_database_for(db_url, this_server())  # before migrating: no other version runs
    store = Store.from_url(db_url, migrate=True)
    # the sources of --repo and --sources-config (docs/sources.md): bad ones stop the start
    flags = flags_source(settings.repo, settings.project, settings.branch, settings.path)
    store.declare_sources(("flags", "file"), declared_sources(flags, settings.sources_config))
    db = Database(store.engine)
    token, wrote_config = _first_start(settings, db)
    stats = RequestStats()
    bot = build_bot(settings, store)  # PR plans and commit statuses (docs/pull-requests.md)
    notes = build_gitlab_bot(settings, store)  # `/dockyard approve` on GitLab (policies.md)
    if controller_factory is not None:
        controller = controller_factory(settings, store)
    else:
        controller = load_controller(settings, store, stats, reporter=bot, clusters=clusters)
    # approvers: the deployed `.dockyard.yml`'s, read from each project's own config repo
    loops = getattr(controller, "loops", None)  # the stored sources' (deployedpolicy)
    deployed = rules_by_project(
        rules_at(getattr(controller, "source", None)),
        loops.config_source if loops is not None else None,
    )
    sources = build_source_bots(settings, store)  # each source's PRs (pr.sourcebots)
    for pr_bot in (bot, notes, sources):  # PR plans preview with the reconcile's engines
        if pr_bot is not None:
            pr_bot.previewer = getattr(controller, "previewer", None)
            pr_bot.deployed = deployed
    return ServerRuntime(
        settings, store, db, controller, stats, clusters, deployed, bot, notes, token,
        wrote_config, sources,
    )  # fmt: skip


def build_web(engine: ServerRuntime) -> Server:
    """The web app (API, console, webhooks, service proxy) over `engine`'s runtime."""
    from reconciler.engine.notifier import build_notifications
    from reconciler.pr.previews import build_previews
    from reconciler.web.app import ProxyFirst, create_app

    settings, store, db, controller = engine.settings, engine.store, engine.db, engine.controller
    stats, bot, notes, deployed = engine.stats, engine.bot, engine.notes, engine.deployed
    clusters = engine.clusters
    proxy = build_proxy(settings, controller, store, db, stats)
    app = create_app(
        proxy=proxy,
        request_stats=stats,
        open_tunnel=build_tunnel_opener(controller),
        settings=settings,
        db=db,
        controller=controller,
        secrets=SecretsCipher(load_or_create_key(settings.data_dir)),
        clock=store.clock,
        pull_requests=bot,
    )
    app.state.gitlab_pull_requests = notes  # reconciler.web.hooks_gitlab
    app.state.source_bots = engine.source_bots  # reconciler.web.hooks_sourceprs
    app.state.server_backends = clusters  # backends/list (reconciler.web.routes_backends)
    app.state.deployed_rules = deployed  # POST plan/files (reconciler.web.routes_pr)
    # preview runs of pull requests (docs/previews.md): label or `/dockyard preview` → pr-<n>
    app.state.preview_runs = build_previews(settings, store, controller)
    # notifications (docs/notifications.md): the receivers' API and this server's notifier
    app.state.notifications, app.state.notifier = build_notifications(store)
    asgi = ProxyFirst(app, proxy) if proxy is not None else app
    return Server(app, store, settings, engine.admin_token, engine.cli_config_written, asgi)


class _Uvicorn(uvicorn.Server):
    """uvicorn, except that SIGTERM ends in exit status 0 once shut down gracefully.

    uvicorn re-raises a captured signal after its graceful shutdown, so a stopped server
    would die "killed by SIGTERM"; for a service manager, a clean stop is status 0.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        captured: list[int] = getattr(self, "_captured_signals", [])
        if sig == signal.SIGTERM and sig in captured:
            captured.remove(sig)


def uvicorn_config(server: Server) -> uvicorn.Config:
    """How uvicorn serves the app: request heads bounded by `max_header_bytes`."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from agent.httpheads import bounded_heads

    limit = server.settings.max_header_bytes
    return uvicorn.Config(
        server.asgi or server.app,
        host=server.settings.host,
        port=server.settings.port,
        log_level="info",
        # No line per request: service traffic through the proxy would flood the log and
        # cost ~10% of the proxy's throughput; /metrics and the run's request stats count it.
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
        # the client is the socket's peer unless the operator names trusted proxies
        proxy_headers=server.settings.forwarded_allow_ips is not None,
        forwarded_allow_ips=server.settings.forwarded_allow_ips or "",
        # a request's line and headers: at most `max_header_bytes` before any auth
        http=bounded_heads(AutoHTTPProtocol, limit, "--max-header-bytes"),
        h11_max_incomplete_event_size=limit,
    )


def serve(server: Server) -> None:
    """Run until SIGINT/SIGTERM; uvicorn drains requests, then the lifespan stops workers."""
    config = uvicorn_config(server)
    try:
        _Uvicorn(config).run()
    finally:
        server.store.close()


def serve_engine_first(engine: ServerRuntime) -> None:
    """`serve`, with the runtime started before the web app is built: jobs' logs and ends
    flow again while the routes are made (a restart's progress: bench/restart_progress.py).
    The app's lifespan finds the runtime started and stops it at shutdown."""
    loop_factory = uvicorn.Config(app="", loop="auto").get_loop_factory()  # as uvicorn's

    async def run() -> None:
        await engine.controller.start()
        # The runtime's first pass first (every host looked at, the jobs it woke passed):
        # on a busy machine the web app's build would take the CPU that pass needs.
        caught_up = getattr(engine.controller, "caught_up", None)
        if caught_up is not None:
            await caught_up(FIRST_PASS_WAIT)
        # The runtime goes on while a thread builds the web app; meanwhile the GIL is handed
        # over every 0.5 ms, not 5: each of the runtime's I/O wake-ups would otherwise wait
        # out the builder's slice.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, 0.0005))
        try:
            server = await asyncio.to_thread(build_web, engine)
        except BaseException:
            await engine.controller.stop()
            raise
        finally:
            sys.setswitchinterval(interval)
        try:
            await _Uvicorn(uvicorn_config(server)).serve()
        finally:
            server.store.close()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run())
