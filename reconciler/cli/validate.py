"""`dockyard validate [PATH...]`: check configuration files without a server.

Directories are scanned for `*.dstack.yml`, `*.dstack.yaml` and `.dstack.yml`; files
named explicitly are checked whatever their name. People get `file:line:col: field:
message` with the offending line and a caret; `--json` prints one object per file.
A symbolic link is reported as an error and never followed; files are read within the
`DOCKYARD_CONFIG_MAX_*` limits (docs/security.md).
Valid files may carry warnings (`schemas.caveats`: legacy or ignored fields), printed as
`file:line:col: warning: field: message`; warnings never change the exit code.
Exit 0 when every file is valid, 1 when any is invalid, 2 on usage errors.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from reconciler.core.escaping import printable
from schemas import ConfigError, Problem, is_config_path, parse_config, peek_kind
from schemas.caveats import config_warnings
from schemas.limits import ConfigLimits, size_problem

_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__"})


@dataclass(frozen=True, slots=True)
class FileReport:
    path: str
    text: str
    type: str | None
    name: str | None
    problems: tuple[Problem, ...]
    warnings: tuple[Problem, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "valid": self.valid,
            "type": self.type,
            "name": self.name,
            "errors": [p.to_json() for p in self.problems],
            "warnings": [p.to_json() for p in self.warnings],
        }


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_command)


def validate_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Files or directories (default: the current directory)."),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check dstack configuration files: every problem with file, line and column."""
    try:
        files = collect_files(paths or [Path(".")])
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not files:
        typer.echo("error: no configuration files found (*.dstack.yml)", err=True)
        raise typer.Exit(2)
    reports = [check_file(path) for path in files]
    if json_output:
        typer.echo(json.dumps([r.to_json() for r in reports], indent=2))
    else:
        typer.echo(render_reports(reports), nl=False)
    raise typer.Exit(0 if all(r.valid for r in reports) else 1)


def collect_files(paths: list[Path]) -> list[Path]:
    """Explicit files as given; directories walked for configuration files (sorted)."""
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(_scan(path))
        else:
            raise FileNotFoundError(f"no such file or directory: {path}")
    return list(dict.fromkeys(found))


def _scan(root: Path) -> list[Path]:
    found: list[Path] = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        found.extend(Path(directory) / name for name in sorted(names) if is_config_path(name))
    return found


def config_limits(environ: Mapping[str, str]) -> ConfigLimits:
    """The server's `DOCKYARD_CONFIG_MAX_*` bounds, so validate agrees with the server."""
    values: dict[str, int] = {}
    for name in ("max_bytes", "max_values", "max_depth"):
        raw = environ.get(f"DOCKYARD_CONFIG_{name.upper()}", "")
        if raw.isdigit() and int(raw) > 0:
            values[name] = int(raw)
    return ConfigLimits(**values)


def read_config_file(path: Path, limits: ConfigLimits) -> bytes | Problem:
    """The file's bytes, or why it is not read: a symbolic link is never followed (its
    target is not opened, let alone shown), nor is anything but a regular file; a file
    over `limits.max_bytes` is not read at all."""
    shown = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Problem(shown, 1, 1, "", LINK_MESSAGE)
        return Problem(shown, 1, 1, "", f"cannot read the file: {exc.strerror or exc}")
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Problem(shown, 1, 1, "", "not a regular file: Dockyard reads only files")
        too_big = size_problem(info.st_size, shown, limits)
        if too_big is not None:
            return too_big
        return handle.read(limits.max_bytes + 1)


LINK_MESSAGE = (
    "the file is a symbolic link: Dockyard never reads a link's target in a config repo "
    "(the server does not either); commit the configuration itself"
)


def check_file(path: Path, limits: ConfigLimits | None = None) -> FileReport:
    """Parse one file; unreadable files are reported as a problem on line 1."""
    shown = str(path)
    limits = limits if limits is not None else config_limits(os.environ)
    data = read_config_file(path, limits)
    if isinstance(data, Problem):
        return FileReport(shown, "", None, None, (data,))
    text = data.decode("utf-8", errors="replace")
    try:
        config = parse_config(data, shown, limits)
    except ConfigError as exc:
        kind, name = peek_kind(data, limits)
        return FileReport(shown, text, kind, name, exc.problems)
    warnings = config_warnings(config, data, shown)
    return FileReport(shown, text, config.type, config.name, (), warnings)


def render_reports(reports: list[FileReport]) -> str:
    """The human report: problems with excerpts, then one summary line."""
    out: list[str] = []
    for report in reports:
        if report.valid:
            label = f"{report.type} {report.name}" if report.name else f"{report.type}"
            out.append(f"{report.path}: ok ({label})")
        lines = report.text.splitlines()
        for problem in report.problems:
            out.extend(_described(problem, lines, ""))
        for warning in report.warnings:
            out.extend(_described(warning, lines, "warning: "))
    invalid = [r for r in reports if not r.valid]
    count = sum(len(r.problems) for r in invalid)
    summary = f"{len(reports)} file(s) checked, {len(invalid)} invalid"
    summary = f"{summary} ({count} problem(s))" if invalid else summary
    warned = sum(len(r.warnings) for r in reports)
    out.append(f"{summary}, {warned} warning(s)" if warned else summary)
    # a file name or a quoted line may hold terminal escapes: shown as text
    return "\n".join(printable(line) for line in "\n".join(out).split("\n")) + "\n"


def _described(problem: Problem, lines: list[str], label: str) -> list[str]:
    """`file:line:col: [warning: ]field: message`, the line with a caret, the hint."""
    where = f"{problem.path}:{problem.line}:{problem.column}: "
    text = problem.format().removesuffix(f" ({problem.hint})")
    described = [where + label + text.removeprefix(where), *_excerpt(lines, problem)]
    return [*described, f"    hint: {problem.hint}"] if problem.hint else described


def _excerpt(lines: list[str], problem: Problem) -> list[str]:
    if not 0 < problem.line <= len(lines):
        return []
    source = lines[problem.line - 1].replace("\t", " ")
    return [f"    {source}", "    " + " " * (problem.column - 1) + "^"]
