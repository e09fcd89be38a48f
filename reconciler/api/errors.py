"""How the `Client` turns HTTP answers into Dockyard errors (one place).

A 2xx passes. A 400 with `problems` is an invalid configuration: it is raised as
`schemas.ConfigError` rebuilt from the server's problems (file:line:col). 401/403 become
`AccessError`, 404 or dstack's code `resource_not_exists` `NotFoundError`, 5xx
`TransientError`, anything else `ApiError`; the message is the server's `detail` line
(dstack's `[{"msg", "code"}]` items, FastAPI's validation items, or a plain string).
Transport failures become `ServerUnreachableError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from reconciler.errors import DockyardError, TransientError

if TYPE_CHECKING:
    from schemas import ConfigError


class ApiError(DockyardError):
    def __init__(self, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class AccessError(ApiError):
    """No token, a bad token, or no right to do this in this project."""


class NotFoundError(ApiError):
    """The named run, fleet, project… does not exist."""


class ServerUnreachableError(TransientError):
    """The server did not answer (down, wrong URL, network)."""


def unreachable(url: str, exc: httpx.HTTPError) -> ServerUnreachableError:
    return ServerUnreachableError(
        f"cannot reach the Dockyard server at {url}: {type(exc).__name__}"
    )


def _item(item: dict[str, Any]) -> str:
    if "loc" in item:  # FastAPI's validation errors
        return f"{'.'.join(str(p) for p in item.get('loc', ())[1:])}: {item.get('msg')}"
    return str(item.get("msg", ""))


def _detail(answer: httpx.Response) -> tuple[str, Any, str | None]:
    """(message, problems, dstack's error code) of an error answer."""
    try:
        data = answer.json()
    except ValueError:
        return answer.text.strip()[:300] or answer.reason_phrase, None, None
    if not isinstance(data, dict):
        return str(data)[:300], None, None
    detail = data.get("detail", data.get("reason", ""))
    code = None
    if isinstance(detail, list):
        items = [item for item in detail if isinstance(item, dict)]
        codes = {item.get("code") for item in items}
        code = codes.pop() if len(codes) == 1 else None
        detail = "; ".join(_item(item) for item in items)
    return str(detail) or answer.reason_phrase, data.get("problems"), code


def _config_error(problems: list[Any]) -> ConfigError:
    from schemas import ConfigError, Problem  # only here: the CLI starts without the models

    return ConfigError(
        [
            Problem(
                path=str(p.get("path", "")),
                line=int(p.get("line") or 0),
                column=int(p.get("column") or 0),
                field=str(p.get("field") or ""),
                message=str(p.get("message", "")),
                hint=p.get("hint"),
            )
            for p in problems
            if isinstance(p, dict)
        ]
    )


def raise_for_answer(answer: httpx.Response) -> None:
    status = answer.status_code
    if status < 400:
        return
    message, problems, code = _detail(answer)
    if status == 400 and isinstance(problems, list) and problems:
        raise _config_error(problems)
    if status in (401, 403):
        raise AccessError(message, status_code=status)
    if status == 404 or code == "resource_not_exists":
        raise NotFoundError(message, status_code=status)
    if status >= 500:
        raise TransientError(f"server error {status}: {message}")
    raise ApiError(message, status_code=status)
