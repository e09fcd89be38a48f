"""`dockyard notification receiver add|list|delete` and `dockyard notification list`.

Receivers are a global admin's (docs/notifications.md): where the server sends
notifications and which events go there. A webhook's signing secret is read from a file
(`--secret-file`, `-` for stdin) or an environment variable (`--secret-env`), never from
the command line (where `ps` would show it), and is never printed back. `list` shows the
deliveries with their outcome: delivered, retrying (with the next attempt), or failed
after N attempts; a member sees their projects' only. Calls `POST /api/notifications/…`
(`reconciler.web.routes_notifications`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.api.notifications import (
    DELIVERIES,
    RECEIVERS,
    NotificationInfo,
    ReceiverInfo,
)
from reconciler.cli.console import JsonOption, ProjectOption, ago, open_client, print_json, table
from reconciler.core.notifying import EVENT_KINDS
from reconciler.errors import UsageError

KINDS = ", ".join(EVENT_KINDS)


def _secret(secret_file: str | None, secret_env: str | None) -> str | None:
    if secret_file is not None and secret_env is not None:
        raise UsageError("give the secret once: --secret-file or --secret-env")
    if secret_file == "-":
        return sys.stdin.read().strip()
    if secret_file is not None:
        try:
            return Path(secret_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"--secret-file {secret_file}: {exc.strerror}") from None
    if secret_env is not None:
        value = os.environ.get(secret_env)
        if not value:
            raise UsageError(f"--secret-env {secret_env}: the variable is not set")
        return value
    return None


def _when(status: str, info: NotificationInfo) -> str:
    if status == "retrying" and info.next_attempt_at is not None:
        return f"retrying, next attempt {info.next_attempt_at.isoformat(timespec='seconds')}"
    if status == "failed":
        return f"failed after {info.attempts} attempts"
    return status


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Notifications: receivers and deliveries.", no_args_is_help=True)
    receivers = typer.Typer(help="Where notifications go (global admins).", no_args_is_help=True)

    @receivers.command("add")
    def add(
        name: Annotated[str, typer.Argument(help="The receiver's name.")],
        url: Annotated[str, typer.Option("--url", help="Where to POST (http:// or https://).")],
        kind: Annotated[str, typer.Option("--kind", help="webhook or slack.")] = "webhook",
        event: Annotated[
            list[str] | None, typer.Option("--event", help=f"An event kind ({KINDS}); repeat.")
        ] = None,
        for_project: Annotated[
            str | None, typer.Option("--for-project", help="Only this project's events.")
        ] = None,
        source: Annotated[
            str | None, typer.Option("--source", help="Only events of this source's project.")
        ] = None,
        secret_file: Annotated[
            str | None, typer.Option("--secret-file", help="The webhook's secret ('-': stdin).")
        ] = None,
        secret_env: Annotated[
            str | None, typer.Option("--secret-env", help="The variable holding the secret.")
        ] = None,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Add a receiver: a signed JSON webhook, or a Slack-compatible incoming webhook."""
        body = {
            "name": name,
            "kind": kind,
            "url": url,
            "secret": _secret(secret_file, secret_env),
            "events": event or list(EVENT_KINDS),
            "project": for_project,
            "source": source,
        }
        with open_client(project) as client:
            added = ReceiverInfo.model_validate(client.post(f"{RECEIVERS}/add", body))
        if json_:
            print_json(added)
            return
        typer.echo(f"receiver {added.name} added: {added.kind} {added.url}")

    @receivers.command("list")
    def list_receivers(json_: JsonOption = False, project: ProjectOption = None) -> None:
        """The receivers, with the events each takes (secrets are never shown)."""
        with open_client(project) as client:
            items = [ReceiverInfo.model_validate(r) for r in client.post(f"{RECEIVERS}/list")]
        if json_:
            print_json(items)
            return
        rows = [
            (
                r.name,
                r.kind,
                r.url,
                ", ".join(r.events),
                r.project or "*",
                r.source or "*",
                "yes" if r.has_secret else "",
            )
            for r in items
        ]
        table(["NAME", "KIND", "URL", "EVENTS", "PROJECT", "SOURCE", "SECRET"], rows)

    @receivers.command("delete")
    def delete(
        name: Annotated[str, typer.Argument(help="The receiver's name.")],
        project: ProjectOption = None,
    ) -> None:
        """Delete a receiver and its deliveries."""
        with open_client(project) as client:
            client.post(f"{RECEIVERS}/delete", {"name": name})
        typer.echo(f"receiver {name} deleted")

    @group.command("list")
    def list_(
        limit: Annotated[int, typer.Option("-n", "--last")] = 50,
        for_project: Annotated[
            str | None, typer.Option("--for-project", help="Only this project's.")
        ] = None,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """The latest notifications, with their outcome."""
        with open_client(project) as client:
            data = client.post(DELIVERIES, {"limit": limit, "project": for_project})
        items = [NotificationInfo.model_validate(n) for n in data]
        if json_:
            print_json(items)
            return
        rows = [
            (
                n.receiver,
                n.kind,
                n.project or "",
                n.target_name,
                _when(n.status, n),
                n.attempts,
                n.last_error or "",
                ago(n.created_at),
            )
            for n in items
        ]
        table(
            ["RECEIVER", "EVENT", "PROJECT", "TARGET", "OUTCOME", "ATTEMPTS", "LAST ERROR", "AT"],
            rows,
        )

    group.add_typer(receivers, name="receiver")
    app.add_typer(group, name="notification")
