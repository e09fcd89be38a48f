"""The repo policy: an optional `.dockyard.yml` at the root of the config repo (pure).

It says which project the configs belong to, which directories hold configs, how pruning
treats volumes and empty snapshots, the default fleet, and how often to fetch:

```yaml
project: main            # default
paths: ["."]             # directories holding *.dstack.yml files (default: the whole repo)
prune:
  volumes: retain        # retain (default) | delete
  allow_empty: false     # an empty snapshot is an error unless true
default_fleet: null      # runs go to this fleet; unset: the implicit `local` fleet if none
fetch_interval: 60s      # int seconds or 30s / 5m / 1h
policy:                  # limits on runs, checked by every plan (docs/policies.md)
  runs: {max_gpus: 8, gpus: [H100], backends: [aws], max_duration: 24h,
         privileged: false, instance_volumes: false}
  approvers: [alice]     # whose `/dockyard approve` lets a PR head's violations through
  previews:              # preview runs of pull requests (docs/previews.md)
    ttl: 4h              # torn down after this long (default 4h)
    tasks: false         # deploy tasks too (default: services and dev environments only)
    fleets: [local]      # fleets of the PR head a preview may use (default: local)
    budget: {hourly: 5}  # $/h of every preview of the project together
```

Nothing else in a config repo is Dockyard-specific. `parse_policy` validates it like any
config and reports problems as `ConfigIssue`s with file and line.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from reconciler.domain.issues import ConfigIssue

POLICY_FILE = ".dockyard.yml"
CONFIG_SUFFIXES = (".dstack.yml", ".dstack.yaml")
_DURATION = re.compile(r"^(\d+)\s*([smhdw]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _to_seconds(value: Any) -> Any:
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if match is None:
            raise ValueError("expected seconds or a duration like 30s, 5m, 1h")
        return int(match.group(1)) * _UNITS[match.group(2)]
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PrunePolicy(_Strict):
    volumes: Literal["retain", "delete"] = "retain"
    allow_empty: bool = False


class RunLimits(_Strict):
    """What one run may ask for; unset means no limit."""

    max_gpus: int | None = Field(default=None, ge=0)
    """GPUs of the whole run: per job times its jobs (task nodes, service max replicas)."""
    max_price: float | None = Field(default=None, ge=0)
    """$/h of the whole run at its best offer (the bundled catalog; local and SSH fleets $0)."""
    gpus: tuple[str, ...] | None = None
    """GPU names a run may ask for (dstack's names: H100, A100, …)."""
    backends: tuple[str, ...] | None = None
    """Backends a run may name in `backends:` (a run naming none passes)."""
    max_duration: Annotated[int | None, BeforeValidator(_to_seconds), Field(ge=1)] = None
    """Longest `max_duration` (a run without one, or `off`, breaks this limit)."""
    privileged: bool = True
    """Whether `privileged: true` is allowed."""
    instance_volumes: bool = True
    """Whether instance volumes (`/host/path:/path`) are allowed."""


class Budget(_Strict):
    hourly: float | None = Field(default=None, ge=0)
    """$/h for every run of the project: what runs now plus what a plan adds."""


class PreviewBudget(_Strict):
    hourly: float | None = Field(default=None, ge=0)
    """$/h of every preview run of the project together (all open PRs); unset: no limit."""


class PreviewRules(_Strict):
    """`policy.previews`: what a pull request's preview runs may deploy (docs/previews.md)."""

    ttl: Annotated[int, BeforeValidator(_to_seconds), Field(ge=60, le=7 * 86400)] = 4 * 3600
    """Seconds a preview lives before it is torn down (1 minute to 7 days; default 4 h)."""
    tasks: bool = False
    """Whether tasks are deployed too (default: services and dev environments only)."""
    fleets: tuple[Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,40}$")], ...] = Field(
        default=("local",), max_length=20
    )
    """Fleets of the PR head a preview may deploy and place runs on."""
    budget: PreviewBudget = PreviewBudget()


Login = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")]
"""A GitHub or GitLab user name (`octocat`, `jane.doe`)."""


class PolicyRules(_Strict):
    """`policy:` of `.dockyard.yml`: limits checked on every plan and enforced at apply."""

    budget: Budget = Budget()
    runs: RunLimits = RunLimits()
    approvers: tuple[Login, ...] = Field(default=(), max_length=100)
    """Logins whose `/dockyard approve` on a PR lets its head's violations through
    (docs/policies.md)."""
    previews: PreviewRules = PreviewRules()
    """Preview runs of pull requests (docs/previews.md)."""

    def may_approve(self, login: str) -> bool:
        """Whether `login` is a named approver (logins compare case-insensitively)."""
        return login.casefold() in {name.casefold() for name in self.approvers}

    @property
    def prices_runs(self) -> bool:
        """Whether checking needs the runs' prices."""
        return self.budget.hourly is not None or self.runs.max_price is not None


class RepoPolicy(_Strict):
    """The validated `.dockyard.yml`; every field has a default."""

    project: str = Field(default="main", pattern=r"^[a-z0-9][a-z0-9_-]{0,49}$")
    paths: tuple[str, ...] = (".",)
    prune: PrunePolicy = PrunePolicy()
    default_fleet: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9-]{1,40}$")
    fetch_interval: Annotated[int, BeforeValidator(_to_seconds), Field(ge=1)] = 60
    policy: PolicyRules = PolicyRules()

    @property
    def allow_empty(self) -> bool:
        return self.prune.allow_empty

    @property
    def retains_volumes(self) -> bool:
        return self.prune.volumes == "retain"

    def is_config_path(self, path: str) -> bool:
        """Whether a repo-relative file path is a config this policy selects."""
        if not path.endswith(CONFIG_SUFFIXES):
            return False
        return self.paths == (".",) or any(_under(path, root) for root in self.paths)


def _under(path: str, root: str) -> bool:
    root = root.strip("/")
    if root in ("", "."):
        return True
    return path == root or path.startswith(root.removeprefix("./") + "/")


def parse_policy(text: str | bytes, path: str = POLICY_FILE) -> RepoPolicy | list[ConfigIssue]:
    """Validate a `.dockyard.yml`; return the policy, or the problems found (pure)."""
    try:
        data = YAML(typ="rt", pure=True).load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return [ConfigIssue(path, line, None, None, f"invalid YAML: {problem}")]
    if data is None:
        return RepoPolicy()
    if not isinstance(data, dict):
        return [ConfigIssue(path, 1, 1, None, "expected a mapping of policy fields")]
    try:
        return RepoPolicy.model_validate(_plain(data))
    except ValidationError as exc:
        return [_to_issue(error, data, path) for error in exc.errors()]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _to_issue(error: Any, data: Any, path: str) -> ConfigIssue:
    loc = tuple(error.get("loc", ()))
    field = ".".join(str(part) for part in loc) or None
    line, column = _position(data, loc)
    return ConfigIssue(path, line, column, field, str(error.get("msg", "invalid value")))


def _position(data: Any, loc: tuple[Any, ...]) -> tuple[int | None, int | None]:
    """1-based line/column of the deepest key of `loc` that exists in the YAML document."""
    line: int | None = None
    column: int | None = None
    node = data
    for part in loc:
        lc = getattr(node, "lc", None)
        if lc is None:
            break
        try:
            if isinstance(node, dict) and part in node:
                row, col = lc.key(part)
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                row, col = lc.item(part)
            else:
                break
        except (KeyError, IndexError, TypeError):
            break
        line, column = row + 1, col + 1
        node = node[part]
    return line, column
