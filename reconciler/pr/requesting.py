"""HTTP calls to a code host's REST API, with every failure turned into one clear line.

`HostApi` wraps an `httpx.Client` (a transport can be passed in, so tests may use a
`MockTransport`; the tests in `tests/pr` use a real loopback server). The token travels in
a header only; messages name the method and the path, never a header, a query string or
the token. Status codes get their own advice (401: the token; 403: its permissions; 404:
the repo and PR number; 422: the host's own message; 429 or a 403 with no rate budget
left: wait, with the `Retry-After` the host sent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from reconciler.errors import DockyardError, TransientError


class HostError(DockyardError):
    """A code host answered with an error (or could not be reached); `str()` says what to do."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RateLimitedError(HostError, TransientError):
    """The host's rate limit is spent; `delay` is how long it asked us to wait."""

    def __init__(self, message: str, *, status: int, delay: float) -> None:
        HostError.__init__(self, message, status=status)
        self.delay = delay


def safe_url(url: str) -> str:
    """`url` without user info, query or fragment (fit for a message)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class HostApi:
    """One host's REST API: `request(method, path, json=...)` → decoded JSON or `HostError`."""

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        headers: Mapping[str, str],
        token_hint: str,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self._token_hint = token_hint
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=dict(headers),
            transport=transport,
            timeout=timeout,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
    ) -> httpx.Response:
        """Send one request; the response when it is 2xx, else a `HostError`."""
        where = f"{method} {safe_url(self.base_url + path)}"
        try:
            response = self._client.request(method, path, json=json, params=params)
        except httpx.TimeoutException:
            raise HostError(f"{self.name} did not answer in time: {where}") from None
        except httpx.HTTPError as exc:
            raise HostError(
                f"cannot reach {self.name} ({type(exc).__name__}): {where}; "
                "check the API URL and the network"
            ) from None
        if response.is_success:
            return response
        raise self._error(response, where)

    def _error(self, response: httpx.Response, where: str) -> HostError:
        status = response.status_code
        said = host_message(response)
        retry_after = _retry_after(response)
        exhausted = response.headers.get("x-ratelimit-remaining") == "0"
        if status == 429 or (status == 403 and (retry_after is not None or exhausted)):
            delay = retry_after if retry_after is not None else _reset_delay(response)
            return RateLimitedError(
                f"{self.name} rate limit reached ({status}) on {where}: "
                f"retry after {delay:g} s (Retry-After)",
                status=status,
                delay=delay,
            )
        advice = {
            401: f"the token was refused: check that {self._token_hint} is set and not expired",
            403: (
                f"the token lacks a permission for this call: {self._token_hint} needs write "
                "access to pull-request comments and commit statuses"
            ),
            404: (
                "not found: check the repository (OWNER/NAME) and the PR number; a token "
                "that cannot see a private repository also gets 404"
            ),
            422: "the request was rejected as invalid",
        }.get(status, "unexpected answer")
        detail = f": {said}" if said else ""
        return HostError(f"{self.name} {status} on {where}: {advice}{detail}", status=status)


def host_message(response: httpx.Response) -> str:
    """The host's own short explanation (`message` / `error`), at most 200 characters."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    said = body.get("message") or body.get("error") or ""
    if isinstance(said, dict | list):
        said = str(said)
    return str(said)[:200]


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after", "").strip()
    return float(raw) if raw.isdigit() else None


def _reset_delay(response: httpx.Response) -> float:
    """Seconds until `X-RateLimit-Reset` (GitHub: epoch seconds), 60 when unknown."""
    raw = response.headers.get("x-ratelimit-reset", "")
    date = response.headers.get("date")
    if raw.isdigit() and date:
        from email.utils import parsedate_to_datetime

        try:
            now = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return 60.0
        return max(1.0, float(raw) - now)
    return 60.0
