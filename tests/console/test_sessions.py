"""Console session cookies and CSRF tokens (pure): forged, tampered, expired and foreign
values are refused; a CSRF token belongs to its session only."""

from __future__ import annotations

from pathlib import Path

from reconciler.web.console.sessions import SessionSigner, load_key

KEY = b"k" * 32


def test_a_session_verifies_until_it_expires() -> None:
    signer = SessionSigner(KEY, lifetime=3600)
    session = signer.issue("ab" * 32, now=1000.0)
    assert signer.verify(session.value, now=4599.0) == session
    assert signer.verify(session.value, now=4600.0) is None


def test_tampered_forged_and_foreign_values_are_refused() -> None:
    signer = SessionSigner(KEY, lifetime=3600)
    value = signer.issue("ab" * 32, now=0.0).value
    data, mac = value.split(".")
    assert signer.verify(data + "." + mac[:-1] + ("A" if mac[-1] != "A" else "B"), 1.0) is None
    other = SessionSigner(b"x" * 32, lifetime=3600).issue("ab" * 32, now=0.0).value
    assert signer.verify(other, 1.0) is None
    assert signer.verify("not-a-session", 1.0) is None
    assert signer.verify("a." * 400, 1.0) is None


def test_csrf_tokens_are_per_session() -> None:
    signer = SessionSigner(KEY, lifetime=3600)
    one, two = signer.issue("ab" * 32, 0.0), signer.issue("ab" * 32, 0.0)
    assert signer.csrf_ok(one, signer.csrf(one))
    assert not signer.csrf_ok(one, signer.csrf(two))
    assert not signer.csrf_ok(one, "")


def test_the_key_file_is_made_once_and_private(tmp_path: Path) -> None:
    key = load_key(tmp_path / "console-key")
    assert len(key) == 32
    assert (tmp_path / "console-key").stat().st_mode & 0o777 == 0o600
    assert load_key(tmp_path / "console-key") == key
