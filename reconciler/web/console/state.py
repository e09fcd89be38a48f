"""What every console route shares: the session signer, the templates, the samples.

`Console.guard` runs a page's body and turns `DeniedError` into the answer a browser
needs: no session → the sign-in page (303), 403/404 → an error page with that status.
`Console.check_csrf` refuses a state-changing form whose CSRF token is not the session's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from reconciler.web.console.access import DeniedError, Viewer, viewer_of
from reconciler.web.console.rendering import SECURITY_HEADERS, Renderer
from reconciler.web.console.samples import SampleBook
from reconciler.web.console.sessions import SessionSigner, load_key
from reconciler.web.context import WebContext

SESSION_HOURS = 12.0
MAX_FORM_BYTES = 16 * 1024


class Console:
    def __init__(self, data_dir: Path, *, session_hours: float = SESSION_HOURS) -> None:
        self._data_dir = data_dir
        self._signer: SessionSigner | None = None
        self._hours = session_hours
        self.renderer = Renderer()
        self.samples = SampleBook()

    @property
    def signer(self) -> SessionSigner:
        if self._signer is None:  # the key file is made on first use, not at import
            key = load_key(self._data_dir / "console-key")
            self._signer = SessionSigner(key, lifetime=self._hours * 3600)
        return self._signer

    async def viewer(self, request: Request, context: WebContext) -> Viewer:
        return await viewer_of(request, context, self.signer)

    def page(self, name: str, viewer: Viewer | None, status: int = 200, **values: Any) -> Response:
        return self.renderer.page(name, status, viewer=viewer, **values)

    async def guard(self, request: Request, body: Callable[[], Awaitable[Response]]) -> Response:
        try:
            return await body()
        except DeniedError as denied:
            if denied.status == 401:
                target = quote(request.url.path, safe="/")
                return RedirectResponse(
                    f"/console/login?next={target}", status_code=303, headers=SECURITY_HEADERS
                )
            return self.page("error.html", None, denied.status, message=denied.message)

    async def form(self, request: Request) -> dict[str, str]:
        """The posted urlencoded form, read up to 16 KiB (more is refused), first values."""
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise DeniedError(413, "form too large")
        try:
            fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=20)
        except ValueError:
            raise DeniedError(400, "too many form fields") from None
        return {key: values[0] for key, values in fields.items() if values}

    def check_csrf(self, viewer: Viewer, form: dict[str, str]) -> None:
        if not self.signer.csrf_ok(viewer.session, form.get("csrf", "")):
            raise DeniedError(403, "the form's CSRF token is missing or wrong: reload the page")
