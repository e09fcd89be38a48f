"""Cloud-init user data for the VMs Dockyard creates (pure text builders).

A fleet VM authorizes the server's SSH key for the image's default user, installs the
Dockyard agent into `/opt/dockyard/venv` with pip and runs it as a systemd service:
`python -m agent serve --data-dir /var/lib/dockyard --http-port P` (HTTP on 127.0.0.1;
the server reaches it through SSH). A gateway VM authorizes the same key and runs Caddy
as the reverse proxy for `*.<domain>` towards the server, with on-demand TLS.

The document is `#cloud-config` followed by JSON (JSON is YAML), so tests can parse it.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stacks.programs.config import ProgramSettings

AGENT_UNIT = "dockyard-agent.service"
AGENT_VENV = "/opt/dockyard/venv"
AGENT_DATA_DIR = "/var/lib/dockyard"


def _document(body: dict[str, Any]) -> str:
    return "#cloud-config\n" + json.dumps(body, indent=2, sort_keys=True) + "\n"


def agent_command(settings: ProgramSettings) -> str:
    """The agent's start command on a fleet VM."""
    args = [
        f"{AGENT_VENV}/bin/python",
        "-m",
        "agent",
        "serve",
        "--data-dir",
        AGENT_DATA_DIR,
        "--http-port",
        str(settings.agent_http_port),
        # systemd runs the agent as root; the server logs in as the image's user.
        "--allow-user",
        settings.ssh_user,
    ]
    if settings.agent_ssh_port is not None:
        args += [
            "--ssh-port",
            str(settings.agent_ssh_port),
            "--authorized-keys",
            "/etc/dockyard/authorized_keys",
            "--host-key",
            "/etc/dockyard/host_key",
        ]
    return " ".join(args)


def _agent_unit(settings: ProgramSettings) -> str:
    return "\n".join(
        [
            "[Unit]",
            "Description=Dockyard agent",
            "After=network-online.target docker.service",
            "Wants=network-online.target",
            "",
            "[Service]",
            f"ExecStart={agent_command(settings)}",
            "Restart=always",
            "RestartSec=5",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def agent_user_data(settings: ProgramSettings) -> str:
    """User data that authorizes the server and installs and starts the agent."""
    install = (
        f"python3 -m venv {AGENT_VENV} && "
        f"{AGENT_VENV}/bin/pip install --quiet {shlex.quote(settings.agent_package)}"
    )
    files: list[dict[str, str]] = [
        {
            "path": f"/etc/systemd/system/{AGENT_UNIT}",
            "permissions": "0644",
            "content": _agent_unit(settings),
        }
    ]
    if settings.agent_ssh_port is not None:
        files.append(
            {
                "path": "/etc/dockyard/authorized_keys",
                "permissions": "0600",
                "content": settings.ssh_public_key.strip() + "\n",
            }
        )
    body = {
        "ssh_authorized_keys": [settings.ssh_public_key.strip()],
        "package_update": True,
        "packages": ["python3-venv"],
        "write_files": files,
        "runcmd": [
            ["mkdir", "-p", AGENT_DATA_DIR],
            ["bash", "-c", install],
            ["systemctl", "daemon-reload"],
            ["systemctl", "enable", "--now", AGENT_UNIT],
        ],
    }
    return _document(body)


def caddyfile(settings: ProgramSettings, *, domain: str, tls: bool) -> str:
    """The gateway's Caddy config: `*.<domain>` → the server, keeping the Host header."""
    upstream = settings.server_url.rstrip("/")
    site = f"*.{domain}" if tls else f"http://*.{domain}"
    tls_block = "  tls {\n    on_demand\n  }\n" if tls else ""
    return (
        f"{site} {{\n{tls_block}  reverse_proxy {upstream} {{\n"
        "    header_up Host {host}\n  }\n}\n"
    )


def gateway_user_data(settings: ProgramSettings, *, domain: str, tls: bool) -> str:
    """User data of a gateway VM: authorize the server, install and configure Caddy."""
    body = {
        "ssh_authorized_keys": [settings.ssh_public_key.strip()],
        "package_update": True,
        "packages": ["caddy"],
        "write_files": [
            {
                "path": "/etc/caddy/Caddyfile",
                "permissions": "0644",
                "content": caddyfile(settings, domain=domain, tls=tls),
            }
        ],
        "runcmd": [["systemctl", "enable", "--now", "caddy"], ["systemctl", "reload", "caddy"]],
    }
    return _document(body)
