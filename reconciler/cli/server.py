"""`dockyard server`: start the Dockyard server (API, webhooks, proxy, workers).

Every flag also comes from a `DOCKYARD_*` environment variable (the flag wins); see
docs/server.md. On first start the admin token is written to `<data-dir>/admin-token` and,
when this machine's CLI has no config yet, project `main` is added to it, so `dockyard ps`
works right away.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from reconciler.quantities import format_duration, format_size, parse_duration, parse_size
from reconciler.settings import (
    LIMIT_FIELDS,
    LOCAL_AGENT_FIELDS,
    OPERATIONS_FIELDS,
    SSH_AGENT_FIELDS,
    Settings,
)

_LIMITS_PANEL = "Input limits (docs/security.md)"


def _limit_option(name: str) -> inspect.Parameter:
    """`--config-max-bytes` etc.: one flag per input bound, its default and variable shown."""
    field = Settings.model_fields[name]
    default = field.get_default(call_default_factory=True)
    help_text = f"{field.description} ({default}). [DOCKYARD_{name.upper()}]"
    option = typer.Option(help=help_text, show_default=False, rich_help_panel=_LIMITS_PANEL)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[int | None, option]
    )


_OPERATIONS_PANEL = "Retention and disk (docs/operations.md)"


def _operations_option(name: str) -> inspect.Parameter:
    """`--job-log-head` etc.: one flag per day-two setting, its default and variable shown."""
    field = Settings.model_fields[name]
    default = field.get_default(call_default_factory=True)
    parsers = {getattr(m, "func", None) for m in field.metadata}
    kind: Any
    if parse_duration in parsers:
        shown, kind = format_duration(default), str | None
    elif parse_size in parsers:
        shown, kind = format_size(default), str | None
    else:
        shown, kind = str(default), int | None
    help_text = f"{field.description} ({shown}). [DOCKYARD_{name.upper()}]"
    option = typer.Option(help=help_text, show_default=False, rich_help_panel=_OPERATIONS_PANEL)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind, option]
    )


_SSH_AGENTS_PANEL = "Agents on SSH fleet hosts (docs/fleets.md)"


def _ssh_agent_option(name: str) -> inspect.Parameter:
    """`--ssh-job-isolation` etc.: the deployed agents' job options, default and variable."""
    field = Settings.model_fields[name]
    default = field.get_default(call_default_factory=True)
    kind: Any = str | None
    if name == "ssh_min_free_disk":
        default = format_size(default)
    elif field.annotation is bool:
        kind = bool | None
    elif field.annotation is int:
        kind = int | None
    shown = "dstack's" if default is None else str(default)
    shown = shown.lower() if isinstance(default, bool) else shown
    if name == "ssh_volume_roots":
        shown = "/mnt:/data:/srv:/scratch"
    elif name == "ssh_allow_job_users":
        shown = "none"
    help_text = f"{field.description} ({shown}). [DOCKYARD_{name.upper()}]"
    option = typer.Option(help=help_text, show_default=False, rich_help_panel=_SSH_AGENTS_PANEL)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind, option]
    )


_LOCAL_AGENT_PANEL = "The local fleet's agent (docs/server.md)"


def _local_agent_option(name: str) -> inspect.Parameter:
    """`--local-min-free-disk` etc.: the local agent's options, default and variable (a
    description that says what unset means already shows it)."""
    field = Settings.model_fields[name]
    default = field.get_default(call_default_factory=True)
    description = field.description or ""
    kind: Any = bool | None if field.annotation is bool else str | None
    if name == "local_min_free_disk":
        description += f" ({format_size(default)})"
    elif kind is not bool | None and ("unset:" in description or "dstack's" in description):
        pass
    else:
        description += f" ({str(default).lower()})"
    help_text = f"{description}. [DOCKYARD_{name.upper()}]"
    option = typer.Option(help=help_text, show_default=False, rich_help_panel=_LOCAL_AGENT_PANEL)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind, option]
    )


def with_limit_flags(func: Callable[..., None]) -> Callable[..., None]:
    """Replace `**limits` in `func`'s signature by one flag per `OPERATIONS_FIELDS` (retention
    and disk), per `LOCAL_AGENT_FIELDS` (the local agent), per `SSH_AGENT_FIELDS` (SSH hosts'
    agents) and per `LIMIT_FIELDS` (input bounds)."""
    signature = inspect.signature(func, eval_str=True)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    params += [_operations_option(name) for name in OPERATIONS_FIELDS]
    params += [_local_agent_option(name) for name in LOCAL_AGENT_FIELDS]
    params += [_ssh_agent_option(name) for name in SSH_AGENT_FIELDS]
    params += [_limit_option(name) for name in LIMIT_FIELDS]
    func.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    func.__annotations__ = {p.name: p.annotation for p in params}
    return func


def register(app: typer.Typer) -> None:
    @app.command("server")
    @with_limit_flags
    def server(
        repo: Annotated[
            str | None, typer.Option(help="Config repo: path or Git URL. [DOCKYARD_REPO]")
        ] = None,
        branch: Annotated[
            str | None, typer.Option(help="Branch to reconcile (main). [DOCKYARD_BRANCH]")
        ] = None,
        path: Annotated[
            str | None, typer.Option(help="Subdirectory with the configs. [DOCKYARD_PATH]")
        ] = None,
        db: Annotated[
            str | None, typer.Option(help="Database URL (SQLite in the data dir). [DOCKYARD_DB]")
        ] = None,
        data_dir: Annotated[
            Path | None, typer.Option(help="Data directory (~/.dockyard/data). [DOCKYARD_DATA_DIR]")
        ] = None,
        host: Annotated[
            str | None, typer.Option(help="Listen address (127.0.0.1). [DOCKYARD_HOST]")
        ] = None,
        port: Annotated[
            int | None, typer.Option(help="Listen port (3000). [DOCKYARD_PORT]")
        ] = None,
        webhook_secret: Annotated[
            str | None,
            typer.Option(help="Webhook secret. [DOCKYARD_WEBHOOK_SECRET]", show_default=False),
        ] = None,
        project: Annotated[
            str | None, typer.Option(help="Project the repo feeds (main). [DOCKYARD_PROJECT]")
        ] = None,
        forwarded_allow_ips: Annotated[
            str | None,
            typer.Option(
                help="Proxies whose X-Forwarded-For is believed, comma-separated (none). "
                "[DOCKYARD_FORWARDED_ALLOW_IPS]"
            ),
        ] = None,
        attach_host: Annotated[
            str | None,
            typer.Option(
                help="This server's IP address that dstack clients on other machines reach "
                "for attach / ssh <run> (none: this machine only). [DOCKYARD_ATTACH_HOST]"
            ),
        ] = None,
        attach_ports: Annotated[
            str | None,
            typer.Option(
                help="START-END: the ports the attach listeners take (one per SSH host, one "
                "for the local agent; default: free ports). [DOCKYARD_ATTACH_PORTS]"
            ),
        ] = None,
        backends_config: Annotated[
            Path | None,
            typer.Option(
                help="The backends file: Slurm and Kubernetes clusters per project, in dstack's "
                "server config shape (default <data-dir>/backends.yml, else "
                "~/.dstack/server/config.yml when it exists). [DOCKYARD_BACKENDS_CONFIG]"
            ),
        ] = None,
        sources_config: Annotated[
            Path | None,
            typer.Option(
                help="The sources file: config repos the server follows, one per project "
                "(docs/sources.md). [DOCKYARD_SOURCES_CONFIG]"
            ),
        ] = None,
        key_dir: Annotated[
            list[Path] | None,
            typer.Option(
                help="A directory fleets' identity_file may be in (repeatable; default the "
                "data dir and ~/.ssh). [DOCKYARD_KEY_DIRS, ':'-separated]"
            ),
        ] = None,
        **limits: Any,
    ) -> None:
        """Start the server."""
        from reconciler.app import build_engine, serve_engine_first
        from reconciler.cli.console import err

        settings = Settings.from_env(
            os.environ,
            repo=repo,
            branch=branch,
            path=path,
            db=db,
            data_dir=data_dir,
            host=host,
            port=port,
            webhook_secret=webhook_secret,
            project=project,
            forwarded_allow_ips=forwarded_allow_ips,
            attach_host=attach_host,
            attach_ports=attach_ports,
            key_dirs=":".join(str(path) for path in key_dir) if key_dir else None,
            backends_config=backends_config,
            sources_config=sources_config,
            dstack_server_config=Path.home() / ".dstack" / "server" / "config.yml",
            **limits,
        )
        engine = build_engine(settings)
        console = err()
        if engine.admin_token is not None:
            console.print(f"Admin token written to {settings.admin_token_path} (mode 600).")
        if engine.cli_config_written:
            console.print(f"Project {settings.project} added to {settings.cli_config}.")
        console.print(f"Dockyard server listening on {settings.public_url}")
        serve_engine_first(engine)  # jobs progress again before the web app is built
