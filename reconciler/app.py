"""The composition root: Settings → Store → Controller → FastAPI app → uvicorn.

`build_server` opens the database (applying pending migrations), makes sure the admin user
and the default project exist (first start: writes `<data-dir>/admin-token` and, when the
CLI has no config yet, adds the project to it), builds the runtime `Controller` and the web
app. `serve` runs it under uvicorn; SIGINT/SIGTERM stop the server gracefully: the
controller's workers stop, jobs keep running on their hosts and are picked up again by the
next start.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import uvicorn
from fastapi import FastAPI

from reconciler.adapters.db import Store, resolve_db_url
from reconciler.adapters.db.secrets_crypto import SecretsCipher, load_or_create_key
from reconciler.cli.config import ProjectConfig, add_project, load_projects
from reconciler.errors import PermanentError
from reconciler.ports import Controller
from reconciler.settings import Settings
from reconciler.web.app import create_app
from reconciler.web.bootstrap import ensure_admin
from reconciler.web.database import Database

log = logging.getLogger("dockyard.server")

ControllerFactory = Callable[[Settings, Store], Controller]


@dataclass(frozen=True, slots=True)
class Server:
    app: FastAPI
    store: Store
    settings: Settings
    admin_token: str | None
    cli_config_written: bool


def load_controller(settings: Settings, store: Store) -> Controller:
    """The runtime from `reconciler.engine` (`build_controller(settings=, store=)`)."""
    try:
        module = importlib.import_module("reconciler.engine.controller")
    except ModuleNotFoundError as exc:
        raise PermanentError(
            "the runtime (reconciler.engine.controller) is not installed in this build"
        ) from exc
    build: ControllerFactory = module.build_controller
    return build(settings, store)


def _first_start(settings: Settings, db: Database) -> tuple[str | None, bool]:
    now = datetime.now(UTC)
    token = db.write_now(ensure_admin, settings.project, settings.admin_token_path, now)
    if token is None or load_projects(settings.cli_config):
        return token, False
    project = ProjectConfig(settings.project, settings.public_url, token, True)
    add_project(settings.cli_config, project, make_default=True)
    return token, True


def build_server(
    settings: Settings, *, controller_factory: ControllerFactory | None = None
) -> Server:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store.from_url(resolve_db_url(settings.db, settings.data_dir), migrate=True)
    db = Database(store.engine)
    token, wrote_config = _first_start(settings, db)
    controller = (controller_factory or load_controller)(settings, store)
    app = create_app(
        settings=settings,
        db=db,
        controller=controller,
        secrets=SecretsCipher(load_or_create_key(settings.data_dir)),
        clock=store.clock,
    )
    return Server(app, store, settings, token, wrote_config)


def serve(server: Server) -> None:
    """Run until SIGINT/SIGTERM; uvicorn drains requests, then the lifespan stops workers."""
    config = uvicorn.Config(
        server.app,
        host=server.settings.host,
        port=server.settings.port,
        log_level="info",
        lifespan="on",
        timeout_graceful_shutdown=10,
    )
    try:
        uvicorn.Server(config).run()
    finally:
        server.store.close()
