"""How errors become HTTP answers: one place, one JSON shape, never a traceback.

Query functions raise `NotFoundError` / `ConflictError` / `InvalidError`; the runtime raises
`reconciler.errors` classes and `schemas.ConfigError`. `install_error_handlers` maps each
to a status and `{"detail": "<one line>"}` (plus `problems` for configuration errors); any
other exception is logged server-side and answered 500 with a generic line, so nothing
internal (paths, secrets, stack frames) reaches a client.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reconciler.errors import DockyardError, PermanentError, TransientError, UsageError
from schemas.problems import ConfigError

log = logging.getLogger(__name__)


class NotFoundError(DockyardError):
    """The named thing does not exist (in this project)."""


class ConflictError(DockyardError):
    """The request contradicts what exists (a duplicate name, an active run)."""


class InvalidError(DockyardError):
    """The request is well-formed but cannot be done as asked."""


_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (NotFoundError, 404),
    (ConflictError, 409),
    (InvalidError, 400),
    (UsageError, 400),
    (PermanentError, 400),
    (TransientError, 503),
    (DockyardError, 400),
)


def _status_of(exc: Exception) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


async def _dockyard_error(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=_status_of(exc), content={"detail": str(exc)})


async def _config_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ConfigError)
    problems = [{"path": p.path, **p.to_json()} for p in exc.problems]
    return JSONResponse(status_code=400, content={"detail": str(exc), "problems": problems})


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return JSONResponse(status_code=500, content={"detail": "internal server error"})


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DockyardError, _dockyard_error)
    app.add_exception_handler(ConfigError, _config_error)
    app.add_exception_handler(Exception, _unexpected)
