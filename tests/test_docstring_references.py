"""Every module, file and test that a docstring or comment names exists: docstrings stay true.

The code's own prose says who calls a module and where a rule lives; a renamed or deleted
module would leave it pointing a newcomer at nothing (as a preview sweep module of
`reconciler.pr` did, gone since, and the Pulumi engine cited without its `_engine`). This
walks the Python files of the tree (product, tests, benches, scripts), takes each docstring
(module, class, function) and each comment, and checks:

- what tests/test_docs_references.py checks in the docs: repository paths
  (`tests/…py::name`, `bench/<name>.py`, `reconciler/…`, `docs/….md`), dotted names from a
  top package (`reconciler.engine.unmanaged.plan_one`), bare test files and test names, and
  no `§` of a document outside the tree (the condensed dstack spec some modules cited);
- a dotted name from a subpackage, in backticks (`engine.previewruns`,
  `core.escaping.printable`): some package of the tree holds that module and name;
- a relative file path (`core/jobspecs.py`, `workers/jobs.py`): some file of the tree ends
  with it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.test_docs_references import ROOT, defines, problems_in

PACKAGES = ("reconciler", "agent", "schemas", "stacks")
WALKED = (*PACKAGES, "tests", "bench", "scripts")
RELATIVE_FILE = re.compile(r"(?<![\w/.<-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.py)\b")
# a dotted name in backticks, not a file name (`cli.py`, `agent.log`)
BACKTICKED = re.compile(
    r"`([A-Za-z_]\w*(?:\.\w+)*\.(?!(?:py|md|yml|yaml|json|toml|log|txt|sh)`)\w+)`"
)


def python_files() -> list[Path]:
    return sorted(path for top in WALKED for path in (ROOT / top).rglob("*.py"))


def prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each docstring and comment of a Python `source`."""
    for node in _statements(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    """`node` and the statements nested in it (a docstring's owner is one; expressions,
    the bulk of a tree, are skipped)."""
    yield node
    for field in ("body", "orelse", "handlers", "finalbody", "cases"):
        for child in getattr(node, field, ()):
            if isinstance(child, ast.stmt | ast.excepthandler | ast.match_case):
                yield from _statements(child)


@cache
def package_dirs() -> dict[str, tuple[Path, ...]]:
    """Each package folder's name → the folders that hold a package of that name."""
    found: dict[str, list[Path]] = {}
    for top in PACKAGES:
        for init in (ROOT / top).rglob("__init__.py"):
            found.setdefault(init.parent.name, []).append(init.parent.parent)
    return {name: tuple(parents) for name, parents in found.items()}


@cache
def tree_files() -> tuple[str, ...]:
    return tuple(str(path.relative_to(ROOT)) for top in WALKED for path in (ROOT / top).rglob("*"))


def relative_dotted_problem(dotted: str) -> str | None:
    """None if some package of the tree called `dotted`'s first part holds the rest."""
    parts = dotted.split(".")
    bases = package_dirs().get(parts[0])
    if bases is None or parts[0] in PACKAGES:
        return None  # not a package-relative name (or a top one, checked as such)
    for base in bases:
        for size in range(len(parts), 0, -1):
            target = base.joinpath(*parts[:size])
            found = target.with_suffix(".py") if target.with_suffix(".py").is_file() else None
            if found is None and (target / "__init__.py").is_file():
                found = target / "__init__.py"
            if found is None:
                continue
            rest = parts[size:]
            if not rest or defines(found.read_text(), rest[0]):
                return None
            break
    return f"{dotted}: no package of the tree holds it"


def relative_file_problem(path: str) -> str | None:
    if path.split("/")[0] in WALKED:
        return None  # a repository path, checked as such
    if any(name == path or name.endswith("/" + path) for name in tree_files()):
        return None
    return f"{path}: no file of the tree ends with it"


def problems_in_line(line: str) -> Iterator[str]:
    yield from (problem.removeprefix("line 1: ") for problem in problems_in(line))
    found = [relative_dotted_problem(m.group(1)) for m in BACKTICKED.finditer(line)]
    found += [relative_file_problem(m.group(1)) for m in RELATIVE_FILE.finditer(line)]
    yield from (problem for problem in found if problem is not None)


def problems_in_source(source: str) -> Iterator[str]:
    """`line: problem` for each name the prose of a Python `source` gets wrong."""
    for start, text in prose(source):
        for offset, line in enumerate(text.splitlines()):
            yield from (f"{start + offset}: {p}" for p in problems_in_line(line))


def test_every_docstring_names_what_exists() -> None:
    problems = [
        f"{path.relative_to(ROOT)}:{problem}"
        for path in python_files()
        for problem in problems_in_source(path.read_text(encoding="utf-8"))
    ]
    assert not problems, "docstrings and comments name what does not exist:\n" + "\n".join(problems)


def test_the_walk_finds_what_is_missing() -> None:
    source = (
        '"""Called by its background loop (`reconciler.pr.previewsweep`) and by\n'
        "`engine.nowhere`, see `core/no_such_file.py` and tests/e2e/test_no_such_thing.py.\n"
        "Real: `engine.previewruns`, `core.escaping.printable`, `workers/jobs.py`,\n"
        '`reconciler.engine.unmanaged.plan_one`."""\n'
        "# the Pulumi engine (`stacks.pulumi`)\n"
        "X = 1  # `settings.Settings.job_user_rule`, `schemas.fleets`\n"
        "Y = 2  # dstack's defaults (dstack-spec §1.9), see docs/no_such_doc.md\n"
    )
    assert list(problems_in_source(source)) == [
        "1: reconciler.pr.previewsweep: reconciler/pr/__init__.py defines no previewsweep",
        "2: tests/e2e/test_no_such_thing.py: no such file",
        "2: engine.nowhere: no package of the tree holds it",
        "2: core/no_such_file.py: no file of the tree ends with it",
        "5: stacks.pulumi: stacks/__init__.py defines no pulumi",
        "7: docs/no_such_doc.md: no such file",
        "7: dstack-spec §1.9: cites a section of a document the repository does not hold",
    ]
