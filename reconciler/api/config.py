"""The client config file, `~/.dockyard/config.yml` (`DOCKYARD_CONFIG` overrides the path).

Read by `Client.from_config` and by the CLI (`dockyard project`), written by both the CLI
and the server's first start.

Same layout as dstack's `~/.dstack/config.yml`:

    projects:
    - name: main
      url: http://127.0.0.1:3000
      token: <token>
      default: true

The file holds tokens, so it is written with mode 0600. `resolve_project` picks the project
a command talks to: `--project`, else `DOCKYARD_PROJECT`, else the default one.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reconciler.errors import UsageError

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class ProjectConfig:
    name: str
    url: str
    token: str
    default: bool = False


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    value = env.get("DOCKYARD_CONFIG")
    return Path(value).expanduser() if value else Path.home() / ".dockyard" / "config.yml"


def load_projects(path: Path) -> list[ProjectConfig]:
    if not path.exists():
        return []
    try:
        data = yaml.load(path.read_text(), Loader=_LOADER)  # a safe loader (libyaml when built)
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read {path}: {type(exc).__name__}") from None
    items = data.get("projects") if isinstance(data, dict) else None
    projects: list[ProjectConfig] = []
    for item in items or []:
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) for k in ("name", "url", "token")
        ):
            raise UsageError(f"{path}: every project needs name, url and token")
        projects.append(
            ProjectConfig(item["name"], item["url"], item["token"], bool(item.get("default")))
        )
    return projects


def save_projects(path: Path, projects: list[ProjectConfig]) -> None:
    data: dict[str, Any] = {
        "projects": [
            {"name": p.name, "url": p.url, "token": p.token, "default": p.default} for p in projects
        ]
    }
    buffer = io.StringIO()
    from ruamel.yaml import YAML  # writing only: reading stays on libyaml (fast CLI start)

    writer = YAML(typ="safe", pure=True)
    writer.default_flow_style = False
    writer.dump(data, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(buffer.getvalue())
    tmp.replace(path)


def add_project(path: Path, project: ProjectConfig, *, make_default: bool) -> None:
    """Add or replace `project` (by name); the first project is always the default."""
    projects = [p for p in load_projects(path) if p.name != project.name]
    default = make_default or not any(p.default for p in projects)
    if default:
        projects = [ProjectConfig(p.name, p.url, p.token, False) for p in projects]
    projects.append(ProjectConfig(project.name, project.url, project.token, default))
    save_projects(path, projects)


def delete_project(path: Path, name: str) -> None:
    """Remove `name` from the config; the first one left becomes the default if needed."""
    projects = load_projects(path)
    if not any(p.name == name for p in projects):
        raise UsageError(f"project {name} is not in {path}")
    left = [p for p in projects if p.name != name]
    if left and not any(p.default for p in left):
        left[0] = ProjectConfig(left[0].name, left[0].url, left[0].token, True)
    save_projects(path, left)


def set_default(path: Path, name: str) -> None:
    projects = load_projects(path)
    if not any(p.name == name for p in projects):
        raise UsageError(f"project {name} is not in {path}; add it with `dockyard project add`")
    save_projects(path, [ProjectConfig(p.name, p.url, p.token, p.name == name) for p in projects])


def resolve_project(name: str | None, environ: Mapping[str, str] | None = None) -> ProjectConfig:
    env = os.environ if environ is None else environ
    path = config_path(env)
    projects = load_projects(path)
    wanted = name or env.get("DOCKYARD_PROJECT")
    if wanted:
        for project in projects:
            if project.name == wanted:
                return project
        raise UsageError(f"project {wanted} is not in {path}; add it with `dockyard project add`")
    for project in projects:
        if project.default:
            return project
    if projects:
        return projects[0]
    raise UsageError(
        f"no project configured in {path}: start `dockyard server` on this machine, "
        "or run `dockyard project add --name NAME --url URL --token TOKEN`"
    )
