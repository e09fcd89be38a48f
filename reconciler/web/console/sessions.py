"""Console session cookies and CSRF tokens: HMAC-signed, expiring, bound to a token.

A session is the SHA-256 of the Dockyard token the user signed in with, an expiry and a
nonce, signed with the console key (`<data dir>/console-key`, 32 random bytes, 0600,
made at the first start). Each request looks the token hash up again, so a user deleted
or a token refreshed (`dockyard` / API `users/refresh_token`) ends every session made with
it, and roles are read fresh. The CSRF token of a session is an HMAC of the session value:
a form posted from another site cannot know it. Pure apart from `load_key` (a file).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

COOKIE = "dockyard_console"
COOKIE_PATH = "/console"


def load_key(path: Path) -> bytes:
    """The console key at `path`, made (0600) when missing."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


@dataclass(frozen=True, slots=True)
class Session:
    token_hash: str
    expires_at: float
    value: str  # the cookie's value


class SessionSigner:
    def __init__(self, key: bytes, *, lifetime: float) -> None:
        self._key = key
        self.lifetime = lifetime

    def _mac(self, purpose: bytes, data: bytes) -> str:
        digest = hmac.new(self._key, purpose + b"\0" + data, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def issue(self, token_hash: str, now: float) -> Session:
        expires = now + self.lifetime
        body = json.dumps({"h": token_hash, "e": int(expires), "n": secrets.token_hex(8)})
        data = base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")
        value = f"{data}.{self._mac(b'session', data.encode())}"
        return Session(token_hash, float(int(expires)), value)

    def verify(self, value: str, now: float) -> Session | None:
        """The session of a cookie value, or None when forged, malformed or expired."""
        if len(value) > 512 or value.count(".") != 1:
            return None
        data, mac = value.split(".")
        if not hmac.compare_digest(mac, self._mac(b"session", data.encode())):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)))
            token_hash, expires = str(body["h"]), float(body["e"])
        except (ValueError, KeyError, TypeError):
            return None
        if expires <= now:
            return None
        return Session(token_hash, expires, value)

    def csrf(self, session: Session) -> str:
        return self._mac(b"csrf", session.value.encode())

    def csrf_ok(self, session: Session, token: str) -> bool:
        return bool(token) and hmac.compare_digest(token, self.csrf(session))
