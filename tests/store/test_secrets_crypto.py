"""The secrets key file and cipher (no database)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from reconciler.adapters.db.secrets_crypto import KEY_FILE_NAME, SecretsCipher, load_or_create_key
from reconciler.errors import PermanentError


def test_key_is_created_once_private_and_reused(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "data")
    path = tmp_path / "data" / KEY_FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key(tmp_path / "data") == key


def test_roundtrip_and_wrong_key(tmp_path: Path) -> None:
    cipher = SecretsCipher(load_or_create_key(tmp_path / "a"))
    token = cipher.encrypt("hf_s3cret")
    assert "hf_s3cret" not in token
    assert cipher.decrypt(token) == "hf_s3cret"
    other = SecretsCipher(load_or_create_key(tmp_path / "b"))
    with pytest.raises(PermanentError, match="cannot be decrypted") as info:
        other.decrypt(token)
    assert "hf_s3cret" not in str(info.value)
    with pytest.raises(PermanentError, match="not a valid Fernet key"):
        SecretsCipher(b"short")
