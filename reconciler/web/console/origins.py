"""Whether a console sign-in POST comes from the console's own page (pure).

`POST /console/login` (`reconciler.web.console.pages`) has no session yet, so no CSRF
token can guard it: a page of another site could post its own token there and sign the
victim's browser in as the attacker (login CSRF), or probe tokens. Browsers say where a
request comes from, in headers a page cannot set: `Sec-Fetch-Site` and `Origin`.

- `Sec-Fetch-Site` (every current browser sends it) decides when present: `same-origin`
  (or `none`: typed by the user) is accepted, `cross-site` and `same-site` (another
  origin) are refused. The console's pages say `Referrer-Policy: no-referrer`, under
  which a browser's own same-origin form post carries `Origin: null`, so `Origin` cannot
  decide there.
- Without it, an `Origin` is accepted only when it is the server's own: the origin of
  `--external-url` (the URL people open, e.g. behind a TLS proxy), or `http(s)://` + the
  request's `Host` (the browser sets both, so a page elsewhere cannot make them match).
  `Origin: null` (a sandboxed frame, a redirect chain) is refused.
- With neither header, the request is not a browser's form post: every current browser
  sends `Origin` on a POST. It is a script holding a token, which may sign in anyway, so
  it is allowed.

`secure_cookie` says whether the session cookie gets `Secure`: when the request came over
HTTPS or the server's external URL is `https://…` (TLS ended by a proxy in front).
"""

from __future__ import annotations

from urllib.parse import urlsplit


def origin_of(url: str) -> str | None:
    """`scheme://host[:port]` of a URL, lower case; None when it has neither."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def sign_in_refusal(
    *, origin: str | None, fetch_site: str | None, host: str | None, external_url: str | None
) -> str | None:
    """Why a sign-in POST with these headers is refused, or None (see the module doc)."""
    site = (fetch_site or "").strip().lower()
    if site in ("same-origin", "none"):
        return None
    if site:
        return (
            f"a sign-in posted from another site (Sec-Fetch-Site: {site[:40]}) is refused: "
            "sign in on this server's own /console/login page"
        )
    if origin is None:
        return None
    allowed: set[str] = set()
    own = origin_of(external_url) if external_url else None
    if own is not None:
        allowed.add(own)
    if host:
        allowed |= {f"http://{host}".lower(), f"https://{host}".lower()}
    if origin.strip().lower() in allowed:
        return None
    shown = origin[:200]
    return (
        f"a sign-in posted from {shown!r} is refused: sign in on this server's own "
        "/console/login page (behind a proxy, start the server with --external-url set to "
        "the URL people open)"
    )


def secure_cookie(request_scheme: str, external_url: str | None) -> bool:
    """Whether the session cookie is `Secure`: HTTPS here or at the server's external URL."""
    return request_scheme == "https" or (external_url or "").strip().lower().startswith("https://")
