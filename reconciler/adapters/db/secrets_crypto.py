"""Encryption of project secrets at rest: Fernet with a key file in the data dir.

The store keeps only ciphertext (`secrets.ciphertext`); the server encrypts before
`Store.put_secret` and decrypts after `Store.get_secret_ciphertext` with a `SecretsCipher`
built from `load_or_create_key(data_dir)`. The key file is created once with mode 0600;
losing it makes stored secrets unreadable (docs/store.md says so).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from reconciler.errors import PermanentError

KEY_FILE_NAME = "secrets.key"


def load_or_create_key(data_dir: Path) -> bytes:
    """The Fernet key in `<data_dir>/secrets.key`, generated (mode 0600) if missing."""
    path = data_dir.expanduser() / KEY_FILE_NAME
    if path.exists():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as handle:
        handle.write(key + b"\n")
    return key


class SecretsCipher:
    """Encrypts and decrypts secret values (str) to and from ciphertext (str)."""

    def __init__(self, key: bytes) -> None:
        try:
            self._fernet = Fernet(key)
        except ValueError as exc:
            raise PermanentError("the secrets key file is not a valid Fernet key") from exc

    def encrypt(self, value: str) -> str:
        return self._fernet.encrypt(value.encode()).decode("ascii")

    def decrypt(self, ciphertext: str) -> str:
        try:
            return self._fernet.decrypt(ciphertext.encode("ascii")).decode()
        except InvalidToken:
            raise PermanentError(
                "a stored secret cannot be decrypted with this server's key "
                "(was the data dir's secrets.key replaced?)"
            ) from None
