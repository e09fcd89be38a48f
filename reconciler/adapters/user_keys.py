"""Each user's SSH key pair, held by the server, for dstack's `attach` and `ssh <run>`.

dstack's client downloads the caller's key pair from `users/get_my_user` and attaches to a
job over SSH with it. The server keeps one ed25519 pair per user in
`<data dir>/user-keys/<user id>.key`: the OpenSSH private key encrypted with the secrets
cipher (as project secrets are) and the public key, in one JSON file of mode 0600. The
public key is authorized on the local agent (`authorized_keys`, as a user key: sessions and
job ports, never the agent's API). The web's `users/get_my_user` (the caller's own pair
only) and the run answers (`run_spec.ssh_key_pub`) call `UserKeys.pair`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import asyncssh

from agent.local import local_paths
from agent.ssh.server import user_key_line

KEYS_DIR_NAME = "user-keys"


class Box(Protocol):
    """Encrypts at rest (the secrets cipher)."""

    def encrypt(self, plaintext: str) -> str: ...

    def decrypt(self, ciphertext: str) -> str: ...


@dataclass(frozen=True, slots=True)
class UserKeyPair:
    public_key: str  # one OpenSSH line
    private_key: str  # OpenSSH PEM


class UserKeys:
    """Users' key pairs in the server's data dir (generated on first use)."""

    def __init__(self, data_dir: Path, box: Box) -> None:
        self._dir = data_dir.expanduser() / KEYS_DIR_NAME
        self._agent_keys = local_paths(data_dir.expanduser()).authorized_keys
        self._box = box

    def pair(self, user_id: str, username: str) -> UserKeyPair:
        """The user's pair, generated and authorized on the local agent if missing."""
        path = self._dir / f"{_file_name(user_id)}.key"
        if not path.exists():
            self._create(path, username)
        raw = json.loads(path.read_text())
        pair = UserKeyPair(
            public_key=str(raw["public_key"]),
            private_key=self._box.decrypt(str(raw["private_key"])),
        )
        authorize_user_key(self._agent_keys, pair.public_key)
        return pair

    def _create(self, path: Path, username: str) -> None:
        key = asyncssh.generate_private_key("ssh-ed25519", comment=f"dockyard-{username}")
        body = {
            "public_key": key.export_public_key().decode().strip(),
            "private_key": self._box.encrypt(key.export_private_key().decode()),
        }
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another request created it first: theirs stands
            return
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(body))


def authorize_user_key(authorized_keys: Path, public_key: str) -> None:
    """Add `public_key` as a user key (`user_key_line`) unless the key is already there."""
    blob = public_key.split()[1]
    lines = authorized_keys.read_text().splitlines() if authorized_keys.exists() else []
    if any(blob in line.split() for line in lines):
        return
    authorized_keys.parent.mkdir(parents=True, exist_ok=True)
    with open(authorized_keys, "a") as handle:
        handle.write(user_key_line(public_key) + "\n")
    authorized_keys.chmod(0o600)


def _file_name(user_id: str) -> str:
    if not user_id.replace("-", "").isalnum():
        raise ValueError(f"not a user id: {user_id!r}")
    return user_id
