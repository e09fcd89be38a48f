"""The SSH alias `dockyard attach` writes: `Host <run>` in `~/.dockyard/ssh/config`.

`~/.ssh/config` gets one `Include ~/.dockyard/ssh/config` line at its top (added once), so
`ssh <run>` and IDEs (VS Code Remote-SSH) find the alias. Each run's block is replaced on
every attach. The identity is `~/.dockyard/ssh/id_ed25519`, generated on first use (mode
0600); its public key is what an admin authorizes on the fleet's hosts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

INCLUDE_LINE = "Include ~/.dockyard/ssh/config"


@dataclass(frozen=True, slots=True)
class Alias:
    name: str
    hostname: str
    port: int
    user: str


def ensure_identity(home: Path) -> Path:
    key = home / ".dockyard" / "ssh" / "id_ed25519"
    if key.exists():
        return key
    key.parent.mkdir(parents=True, exist_ok=True)
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    key.with_suffix(".pub").write_bytes(public + b" dockyard\n")
    return key


def render_block(alias: Alias, identity: Path) -> str:
    return (
        f"Host {alias.name}\n"
        f"  HostName {alias.hostname}\n"
        f"  Port {alias.port}\n"
        f"  User {alias.user}\n"
        f"  IdentityFile {identity}\n"
        "  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n"
        "  LogLevel ERROR\n"
    )


def replace_block(text: str, name: str, block: str) -> str:
    """`text` with the `Host <name>` block replaced by `block` (or `block` appended)."""
    pattern = re.compile(rf"^Host {re.escape(name)}\n(?:[ \t]+.*\n?)*", re.MULTILINE)
    if pattern.search(text):
        return pattern.sub(block, text, count=1)
    return (text.rstrip("\n") + "\n\n" if text.strip() else "") + block


def write_alias(home: Path, alias: Alias) -> Path:
    """Write the alias and the include; returns the Dockyard SSH config path."""
    identity = ensure_identity(home)
    config = home / ".dockyard" / "ssh" / "config"
    current = config.read_text() if config.exists() else ""
    config.write_text(replace_block(current, alias.name, render_block(alias, identity)))
    user_config = home / ".ssh" / "config"
    user_config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = user_config.read_text() if user_config.exists() else ""
    if INCLUDE_LINE not in existing:
        user_config.write_text(f"{INCLUDE_LINE}\n\n{existing}" if existing else f"{INCLUDE_LINE}\n")
        user_config.chmod(0o600)
    return config
