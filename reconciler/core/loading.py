"""From a snapshot's files to the desired state (pure: bytes in, values out).

`parse_document` turns one file into a `Document` (the `schemas` model, its normalized
spec and hash, or the problems found). The git source caches documents by blob SHA, so a
new commit parses only the files that changed; `Document.at(path)` re-homes a cached
document when the same content appears under another path.

`load_desired` then checks what only makes sense across files and builds the
`DesiredState`: every resource needs a `name` (GitOps tracks a resource across commits by
kind and name; dstack's random names would create a new resource on every commit), no two
files may declare the same kind and name, and a repo that declares no fleet gets the
implicit default fleet `local` (this host), flagged `implicit` so the plan shows it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reconciler.core.policy import RepoPolicy
from reconciler.domain.desired import IMPLICIT_PATH, DesiredResource, DesiredState
from reconciler.domain.issues import ConfigIssue
from reconciler.domain.kinds import Kind
from schemas import ConfigError, Problem
from schemas.caveats import config_warnings

ConfigParser = Callable[[bytes, str], Any]
"""`schemas.parse_config`: text and path → model with `type`, `name`, `normalized()`,
`spec_hash()`; raises `schemas.ConfigError`."""

DEFAULT_FLEET = "local"
_IMPLICIT_FLEET_YAML = b"type: fleet\nname: local\nnodes: 1\n"
_NAME_LINE = re.compile(rb"^name\s*:", re.MULTILINE)
_KINDS = {kind.value: kind for kind in Kind}


@dataclass(frozen=True, slots=True)
class Document:
    """One parsed config file. `kind` is None for an invalid file or a preset."""

    path: str
    kind: Kind | None = None
    name: str | None = None
    line: int = 1
    spec: Mapping[str, Any] | None = None
    spec_hash: str | None = None
    model: Any = None
    issues: tuple[ConfigIssue, ...] = ()
    warnings: tuple[ConfigIssue, ...] = ()
    """`schemas.caveats` warnings of a valid file (legacy or ignored fields)."""

    def at(self, path: str) -> Document:
        """The same content found under another path."""
        if path == self.path:
            return self
        issues = tuple(replace(issue, path=path) for issue in self.issues)
        warnings = tuple(replace(warning, path=path) for warning in self.warnings)
        return replace(self, path=path, issues=issues, warnings=warnings)


def parse_document(text: bytes, path: str, parse: ConfigParser) -> Document:
    """Parse one config file; problems become issues instead of exceptions."""
    try:
        model = parse(text, path)
    except ConfigError as exc:
        issues = tuple(_issue(path, p) for p in exc.problems)
        return Document(path=path, issues=issues or (ConfigIssue(path, 1, 1, None, str(exc)),))
    warnings = tuple(_issue(path, p) for p in config_warnings(model, text, path))
    kind = _KINDS.get(str(model.type))
    if kind is None:  # a preset: client-side only, nothing to deploy
        return Document(path=path, model=model)
    match = _NAME_LINE.search(text)
    line = text.count(b"\n", 0, match.start()) + 1 if match else 1
    return Document(
        path=path,
        kind=kind,
        name=model.name,
        line=line,
        spec=model.normalized(),
        spec_hash=model.spec_hash(),
        model=model,
        warnings=warnings,
    )


def _issue(path: str, problem: Problem) -> ConfigIssue:
    message = _with_hint(problem.message, problem.hint)
    return ConfigIssue(path, problem.line, problem.column, problem.field or None, message)


def _with_hint(message: str, hint: str | None) -> str:
    return f"{message} ({hint})" if hint else message


def load_desired(
    documents: Iterable[Document],
    *,
    commit: str,
    policy: RepoPolicy,
    parse: ConfigParser,
    issues: Iterable[ConfigIssue] = (),
) -> DesiredState:
    """The desired state of a commit: resources in path order, and every issue found."""
    found = list(issues)
    resources: list[DesiredResource] = []
    seen: dict[tuple[Kind, str], DesiredResource] = {}
    docs = sorted(documents, key=lambda doc: doc.path)
    warnings: list[ConfigIssue] = []
    for doc in docs:
        found += doc.issues
        warnings += doc.warnings
        if doc.kind is None or doc.spec is None or doc.spec_hash is None:
            continue
        if not doc.name:
            found.append(_unnamed_issue(doc))
            continue
        first = seen.get((doc.kind, doc.name))
        if first is not None:
            found.append(_duplicate_issue(doc, first))
            continue
        resource = DesiredResource(
            kind=doc.kind,
            name=doc.name,
            project=policy.project,
            path=doc.path,
            line=doc.line,
            spec=doc.spec,
            spec_hash=doc.spec_hash,
            model=doc.model,
        )
        seen[(doc.kind, doc.name)] = resource
        resources.append(resource)
    has_fleet = any(r.kind is Kind.FLEET for r in resources)
    if docs and not has_fleet and policy.default_fleet in (None, DEFAULT_FLEET):
        resources.append(implicit_fleet(policy.project, parse))
    return DesiredState(
        project=policy.project,
        commit=commit,
        resources=tuple(resources),
        issues=tuple(found),
        config_files=len(docs),
        warnings=tuple(warnings),
    )


def _unnamed_issue(doc: Document) -> ConfigIssue:
    kind = doc.kind.value if doc.kind else "resource"
    return ConfigIssue(
        doc.path,
        1,
        1,
        "name",
        f"this {kind} has no `name`: GitOps tracks resources across commits by kind and name, "
        "so every resource needs a stable name (add `name: my-name`)",
    )


def _duplicate_issue(doc: Document, first: DesiredResource) -> ConfigIssue:
    kind = doc.kind.value if doc.kind else "resource"
    return ConfigIssue(
        doc.path,
        doc.line,
        1,
        "name",
        f"{kind} {doc.name!r} is also declared in {first.path}:{first.line}; a kind and name "
        "must be declared by one file only",
    )


def implicit_fleet(project: str, parse: ConfigParser) -> DesiredResource:
    """The default fleet of a repo that declares none: this host, one node."""
    try:
        model = parse(_IMPLICIT_FLEET_YAML, IMPLICIT_PATH)
        spec: Mapping[str, Any] = model.normalized()
        spec_hash = str(model.spec_hash())
    except ConfigError:
        model = None
        spec = {"type": "fleet", "name": DEFAULT_FLEET, "nodes": {"min": 1, "max": 1}}
        spec_hash = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return DesiredResource(
        kind=Kind.FLEET,
        name=DEFAULT_FLEET,
        project=project,
        path=IMPLICIT_PATH,
        line=0,
        spec=spec,
        spec_hash=spec_hash,
        model=model,
        implicit=True,
    )
