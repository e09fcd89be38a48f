"""How errors become HTTP answers: one place, one JSON shape, never a traceback.

Query functions raise `NotFoundError` / `ConflictError` / `InvalidError`; the runtime raises
`reconciler.errors` classes and `schemas.ConfigError`. `install_error_handlers` maps each
to a status and dstack's error shape, `{"detail": [{"msg": "<one line>", "code": …}]}`
(plus `problems` for configuration errors): what dstack's client reads as a
`ServerClientError` is a 400 with dstack's code (`resource_not_exists`, `resource_exists`,
`error`), so the dstack CLI shows our message. Any other exception is caught by
`ErrorShield`, logged server-side by type and place only, and answered 500 with a generic
line, so nothing internal (messages, secrets, stack frames) reaches a client or the log.
"""

from __future__ import annotations

import logging
import traceback

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reconciler.errors import (
    ConflictError,
    DockyardError,
    InvalidError,
    NotFoundError,
    PermanentError,
    TransientError,
    UsageError,
)
from schemas.problems import ConfigError

log = logging.getLogger(__name__)

# The API's errors live in `reconciler.errors` (the store's read models raise them too).
__all__ = [
    "ConflictError",
    "ErrorShield",
    "InvalidError",
    "NotFoundError",
    "error_body",
    "install_error_handlers",
    "log_unexpected",
]


# (class, HTTP status, dstack's ServerClientErrorCode); the first match wins.
_STATUS: tuple[tuple[type[Exception], int, str], ...] = (
    (NotFoundError, 400, "resource_not_exists"),
    (ConflictError, 400, "resource_exists"),
    (InvalidError, 400, "error"),
    (UsageError, 400, "error"),
    (PermanentError, 400, "error"),
    (TransientError, 503, "error"),
    (DockyardError, 400, "error"),
)


def _status_of(exc: Exception) -> tuple[int, str]:
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            return status, code
    return 500, "error"


def error_body(message: str, code: str = "error") -> dict[str, list[dict[str, str]]]:
    """dstack's error JSON: one item, so its client raises the error class of `code`."""
    return {"detail": [{"msg": message, "code": code}]}


async def _dockyard_error(request: Request, exc: Exception) -> JSONResponse:
    status, code = _status_of(exc)
    return JSONResponse(status_code=status, content=error_body(str(exc), code))


async def _config_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ConfigError)
    problems = [{"path": p.path, **p.to_json()} for p in exc.problems]
    return JSONResponse(status_code=400, content={**error_body(str(exc)), "problems": problems})


def log_unexpected(exc: BaseException, method: str, path: str) -> None:
    """Log where an unexpected error was raised, but not its message or locals (secrets)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    log.error("unhandled %s on %s %s at %s", type(exc).__name__, method, path, where)


class ErrorShield:
    """Outermost ASGI middleware: an unexpected exception becomes a generic 500.

    Starlette's own last-resort handler re-raises after answering, so the server would log
    the exception with its message, which may carry a secret; this one does not.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - the outermost loop of a request
            log_unexpected(exc, scope.get("method", "?"), scope.get("path", "?"))
            if not started:
                response = JSONResponse(
                    status_code=500, content=error_body("internal server error")
                )
                await response(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DockyardError, _dockyard_error)
    app.add_exception_handler(ConfigError, _config_error)
