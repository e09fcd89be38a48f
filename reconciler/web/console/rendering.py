"""Pages out: the Jinja2 environment (autoescaping) and the headers every page carries.

`Renderer.page` renders a template into an `HTMLResponse` with a Content-Security-Policy
that allows only this server's own script, style and images (no inline script, no frames:
`frame-ancestors 'none'`), `X-Frame-Options: DENY`, `nosniff`, no referrer and no caching.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FunctionLoader, select_autoescape

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _template(name: str) -> str | None:
    if "/" in name or not name.endswith(".html"):
        return None
    folder = resources.files("reconciler.web.console") / "templates"
    try:
        return (folder / name).read_text()
    except FileNotFoundError:
        return None


class Renderer:
    def __init__(self) -> None:
        self.env = Environment(
            loader=FunctionLoader(_template),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )

    def page(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        body = self.env.get_template(name).render(**values)
        return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)
