"""The `authorized_keys` of the agent SSH server on an SSH fleet's hosts.

An agent deployed to an SSH host runs its SSH server for users (`agent.deploy`, the session
port), reached by dstack's `attach` through the server's forwarding listener
(`engine.sessionforwards`). Its key file holds the control plane's key (a plain line, as
`agent.deploy` writes it) and one user line per user with a stored key pair
(`adapters.user_keys`) who may reach the fleet's jobs — the members of the fleet's project
and the global admins, as on the local agent — limited to that project's jobs
(`agent.ssh.server.user_key_line`). `host_keys_text` is the one computation: the fleets worker
writes it at deploy (`engine.controller._AgentSetup.push_keys`), and again when who may
reach the fleet changes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import asyncssh

from agent.ssh.server import user_key_line
from agent.tunnel import SSHTarget
from reconciler.adapters.db.store import Store
from reconciler.adapters.user_keys import stored_public_keys


def keys_text(
    control_line: str, public_keys: Mapping[str, str], holders: Mapping[str, Collection[str]]
) -> str:
    """Pure: the whole key file: `control_line` (may be empty), then, sorted by user id, one
    user line limited to `holders[user]` for each user in `holders` with a public key."""
    lines = [control_line.strip()] if control_line.strip() else []
    for user_id in sorted(holders):
        public = public_keys.get(user_id)
        if public:
            lines.append(user_key_line(public, holders[user_id]))
    return "".join(f"{line}\n" for line in lines)


def control_key_line(target: SSHTarget) -> str:
    """The public key of the identity the server logs in to `target` with ("" if none)."""
    if not target.identity_file:
        return ""
    key = asyncssh.read_private_key(target.identity_file)
    return str(key.export_public_key().decode()).strip()


def host_keys_text(store: Store, data_dir: Path, fleet_id: str, target: SSHTarget) -> str:
    """The whole `authorized_keys` of the agent SSH server on `target`, a host of fleet
    `fleet_id` (blocking: call it in a thread). A fleet that is gone: the control line only."""
    found = store.fleet_key_holders(fleet_id)
    holders = {} if found is None else {user: [found.project] for user in found.user_ids}
    return keys_text(control_key_line(target), stored_public_keys(data_dir), holders)
