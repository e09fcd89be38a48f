"""What every request handler needs, built once by the app factory and kept on `app.state`.

No module-level state: handlers get the `WebContext` through the `get_context` dependency,
so two apps (two tests, two servers) never share a registry, an engine or a controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, cast

from fastapi import Request

from reconciler.adapters.db.readmodels.database import Database
from reconciler.ports import Clock, Controller
from reconciler.settings import Settings
from reconciler.web.metrics import Metrics
from stacks.catalog import CatalogRow, load_catalog


class SecretBox(Protocol):
    """Encrypts project secrets at rest (the store's crypto helper implements it)."""

    def encrypt(self, plaintext: str) -> str: ...

    def decrypt(self, ciphertext: str) -> str: ...


@dataclass(frozen=True, slots=True)
class WebContext:
    settings: Settings
    db: Database
    controller: Controller
    metrics: Metrics
    secrets: SecretBox
    clock: Clock
    catalog: tuple[CatalogRow, ...] = field(default_factory=load_catalog)
    """The offers catalog `POST plan/files` prices runs with (loaded once, with the app)."""


def get_context(request: Request) -> WebContext:
    return cast(WebContext, request.app.state.context)
