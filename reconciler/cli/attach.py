"""`dockyard attach NAME [--logs] [-p [LOCAL:]PORT]… [--job N] [--replica N]`.

Waits for the run to be running, forwards its ports to localhost through the server (every
port the configuration declares, or the `-p` ones), writes the SSH alias `Host NAME` to
`~/.dockyard/ssh/config` (included from `~/.ssh/config`), prints the IDE link of a dev
environment, then stays until the run ends or Ctrl-C (which detaches; the run keeps
running). `--logs` also streams the job's logs meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from reconciler.api import Client
from reconciler.api import models as wire
from reconciler.api.forwarding import ForwardTarget, PortForwarder, parse_port_mapping
from reconciler.cli.console import ProjectOption, err, open_client, out
from reconciler.cli.sshconfig import Alias, write_alias
from reconciler.cli.waiting import FINISHED, describe_end, print_logs, wait_started
from reconciler.core.devenv import ide_link
from reconciler.errors import PermanentError

POLL_SECONDS = 2.0
_IDE_NAMES = {"vscode": "VS Code Desktop", "cursor": "Cursor", "windsurf": "Windsurf"}


def declared_ports(configuration: dict[str, Any]) -> list[int]:
    """Container ports of a run: the service `port` first, then `ports` (int or "A:B")."""
    ports: list[int] = []
    items: list[Any] = [configuration.get("port"), *(configuration.get("ports") or [])]
    for item in items:
        if isinstance(item, dict):
            item = item.get("container_port")
        if isinstance(item, str):
            item = item.rsplit(":", 1)[-1]
        with contextlib.suppress(TypeError, ValueError):
            if item is not None and int(item) not in ports:
                ports.append(int(item))
    return ports


def _alias(run: wire.Run, name: str) -> Alias | None:
    sub = run.latest_job_submission
    jpd = (sub.job_provisioning_data if sub else None) or {}
    if not jpd.get("hostname") or not jpd.get("ssh_port"):
        return None
    backend = jpd.get("dockyard_backend", jpd.get("backend"))
    if backend == "slurm":  # reached only through the login node, and its agent knows
        return None  # the server's key alone: an alias there could never log in
    local = backend in (None, "local")
    if local:
        return Alias(name, str(jpd["hostname"]), int(jpd["ssh_port"]), name)
    # an SSH host: its own sshd (dstack's attach is given the server's listener instead)
    hostname = jpd.get("ssh_hostname") or jpd["hostname"]
    port = jpd.get("ssh_host_port") or jpd["ssh_port"]
    return Alias(name, str(hostname), int(port), str(jpd.get("ssh_user") or "root"))


async def _until_finished(client: Client, name: str) -> wire.Run:
    while True:
        run = await asyncio.to_thread(client.get_run, name)
        if run.status in FINISHED:
            return run
        await asyncio.sleep(POLL_SECONDS)


async def attached(
    client: Client,
    target: ForwardTarget,
    mappings: list[tuple[int, int]],
    *,
    logs: bool,
    any_port: bool,
) -> wire.Run:
    forwarder = PortForwarder(target, mappings, any_port=any_port)
    forwarder.on_error = lambda message: err().print(f"[yellow]warning:[/yellow] {message}")
    await forwarder.start()
    try:
        for remote, local in forwarder.bound.items():
            out().print(f"Forwarded localhost:{local} → {target.run_name}:{remote}")
        if logs:
            await asyncio.to_thread(
                print_logs,
                client,
                target.run_name,
                job_num=target.job_num,
                replica_num=target.replica_num,
                follow=True,
            )
        return await _until_finished(client, target.run_name)
    finally:
        await forwarder.close()


def _announce(run: wire.Run, name: str) -> None:
    alias = _alias(run, name)
    if alias is not None:
        config = write_alias(Path.home(), alias)
        out().print(f"SSH alias {name} written to {config}: ssh {name}")
    line = ide_line(run.run_spec, name)
    if line is not None:
        out().print(line)


def ide_line(run_spec: Mapping[str, Any], name: str) -> str | None:
    """Pure: "To open in <IDE>: <link>" for a dev environment with an `ide`, else None."""
    configuration = run_spec.get("configuration") or {}
    if configuration.get("type") != "dev-environment":
        return None
    link = ide_link(configuration, name, run_spec.get("working_dir") or None)
    if link is None:
        return None
    ide = str(configuration.get("ide"))
    return f"To open in {_IDE_NAMES.get(ide, ide)}: {link}"


def register(app: typer.Typer) -> None:
    @app.command("attach")
    def attach(
        name: Annotated[str, typer.Argument(help="Run name.")],
        logs: Annotated[bool, typer.Option("--logs", help="Stream the logs too.")] = False,
        port: Annotated[
            list[str] | None, typer.Option("-p", "--port", help="[LOCAL:]PORT to forward.")
        ] = None,
        job: Annotated[int, typer.Option("--job", help="Job number.")] = 0,
        replica: Annotated[int, typer.Option("--replica", help="Replica number.")] = 0,
        project: ProjectOption = None,
    ) -> None:
        """Forward a run's ports, write its SSH alias, optionally stream its logs."""
        with open_client(project) as client:
            run = wait_started(client, name)
            if run.status in FINISHED:
                raise PermanentError(f"run {name} is {run.status}; nothing to attach to")
            configured = declared_ports(run.run_spec.get("configuration") or {})
            mappings = [parse_port_mapping(p) for p in port or []] or [(p, p) for p in configured]
            _announce(run, name)
            target = ForwardTarget(client.url, client.token, client.project, name, job, replica)
            try:
                run = asyncio.run(attached(client, target, mappings, logs=logs, any_port=not port))
            except KeyboardInterrupt:
                err().print(f"Detached. {name} keeps running; stop it with `dockyard stop {name}`.")
                return
            out().print(describe_end(run))
