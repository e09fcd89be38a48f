"""Each user's SSH key pair, held by the server, for dstack's `attach` and `ssh <run>`.

dstack's client downloads the caller's key pair from `users/get_my_user` and attaches to a
job over SSH with it. The server keeps one ed25519 pair per user in
`<data dir>/user-keys/<user id>.key`: the OpenSSH private key encrypted with the secrets
cipher (as project secrets are) and the public key, in one JSON file of mode 0600. The
public key is authorized on the local agent (`authorized_keys`, as a user key: sessions and
job ports of the jobs of the user's projects only, never the agent's API). The web's
`users/get_my_user` (the caller's own pair only) and the run answers
(`run_spec.ssh_key_pub`) call `UserKeys.pair`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
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

    def pair(self, user_id: str, username: str, projects: Iterable[str]) -> UserKeyPair:
        """The user's pair (generated if missing), authorized on the local agent for the
        jobs of `projects` only (the user's projects)."""
        path = self._dir / f"{_file_name(user_id)}.key"
        if not path.exists():
            self._create(path, username)
        raw = json.loads(path.read_text())
        pair = UserKeyPair(
            public_key=str(raw["public_key"]),
            private_key=self._box.decrypt(str(raw["private_key"])),
        )
        authorize_user_key(self._agent_keys, pair.public_key, projects)
        return pair

    def has_pair(self, user_id: str) -> bool:
        """Whether the user's pair is stored already (`pair` would not create it)."""
        return (self._dir / f"{_file_name(user_id)}.key").exists()

    def sync(self, projects_by_user: Mapping[str, Iterable[str]]) -> None:
        """After membership changes: each stored pair's agent line names its user's projects
        now; the pair and line of a user who is gone are deleted."""
        if not self._dir.exists():
            return
        for path in self._dir.glob("*.key"):
            public = str(json.loads(path.read_text())["public_key"])
            if path.stem in projects_by_user:
                authorize_user_key(self._agent_keys, public, projects_by_user[path.stem])
            else:
                revoke_user_key(self._agent_keys, public)
                path.unlink(missing_ok=True)

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


def stored_public_keys(data_dir: Path) -> dict[str, str]:
    """The public key of every stored pair, by user id (no decryption: SSH hosts' agents
    get these lines, `reconciler.engine.hostkeys`)."""
    directory = data_dir.expanduser() / KEYS_DIR_NAME
    if not directory.exists():
        return {}
    keys: dict[str, str] = {}
    for path in sorted(directory.glob("*.key")):
        try:
            keys[path.stem] = str(json.loads(path.read_text())["public_key"])
        except (OSError, ValueError, KeyError):  # being written, or not ours
            continue
    return keys


def authorize_user_key(authorized_keys: Path, public_key: str, projects: Iterable[str]) -> None:
    """Write `public_key` as a user key limited to `projects` (`user_key_line`), replacing
    the key's line when its projects changed; other lines stay."""
    wanted = user_key_line(public_key, projects)
    lines, kept = _lines_without(authorized_keys, public_key)
    if wanted in lines and len(kept) == len(lines) - 1:
        return
    _write_lines(authorized_keys, [*kept, wanted])


def revoke_user_key(authorized_keys: Path, public_key: str) -> None:
    """Remove every line of `public_key` from `authorized_keys`."""
    lines, kept = _lines_without(authorized_keys, public_key)
    if len(kept) != len(lines):
        _write_lines(authorized_keys, kept)


def _lines_without(authorized_keys: Path, public_key: str) -> tuple[list[str], list[str]]:
    blob = public_key.split()[1]
    lines = authorized_keys.read_text().splitlines() if authorized_keys.exists() else []
    return lines, [line for line in lines if blob not in line.split()]


def _write_lines(authorized_keys: Path, lines: list[str]) -> None:
    authorized_keys.parent.mkdir(parents=True, exist_ok=True)
    temporary = authorized_keys.with_name(f".{authorized_keys.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("".join(f"{line}\n" for line in lines))
    os.replace(temporary, authorized_keys)


def _file_name(user_id: str) -> str:
    if not user_id.replace("-", "").isalnum():
        raise ValueError(f"not a user id: {user_id!r}")
    return user_id
