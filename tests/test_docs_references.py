"""Every test, module and bench that README.md and docs/ name exists: a promise is backed.

The docs say which test shows a behaviour and which bench printed a figure; a renamed or
deleted test would leave the promise citing nothing. This walks README.md and docs/**/*.md
and checks each reference it finds:

- a repository path (`tests/…py`, `tests/…py::name`, `bench/<name>.py`, `agent/…`, `reconciler/…`,
  `schemas/…`, `stacks/…`, `scripts/…`) exists, and for `::name` the file defines `name`;
- a dotted module name (`reconciler.engine.hostkeys.host_keys_text`) is a module of the
  tree, or a name defined in the module its longest existing prefix names;
- a bare test file (`test_attach_ssh.py`) is a file under tests/, and a bare test name
  in backticks (`test_ctrl_c_detaches_…`) is a test defined under tests/;
- a document or example (`docs/fleets.md`, `examples/config-repo`) exists;
- no numbered section (`§`) of a document outside the repository is cited (the condensed
  dstack spec beside the repository was): a reader of the tree cannot follow it; name what
  the tree holds (a module, a doc) or dstack's own behaviour in words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("tests", "bench", "agent", "reconciler", "schemas", "stacks", "scripts")
PACKAGES = ("reconciler", "agent", "schemas", "stacks")
# dotted words in the docs that are file names, not modules: the agent's files in its data dir
FILE_NAMES = {"agent.lock", "agent.log", "agent.log.1", "agent.options", "agent.json", "agent.pid"}

PATH = re.compile(rf"(?<![\w/.<-])((?:{'|'.join(TOP)})/[\w/.-]*\w)(?![\w*{{<])(::\w+)?")
DOTTED = re.compile(rf"(?<![\w/.<-])((?:{'|'.join(PACKAGES)})(?:\.\w+)+)(?![\w*/<-])")
BARE_FILE = re.compile(r"(?<![\w/.-])(test_\w+\.py)\b")
BARE_TEST = re.compile(r"`(test_\w+)(?:\[[^`]*\])?`")
# a doc with its extension (`docs/s`, a rate, is no path) or anything under examples/
DOC_PATH = re.compile(r"(?<![\w/.<-])(docs/[\w/-]+\.\w+|examples/[\w/.-]*\w)(?![\w*{<])")
SECTION = re.compile(r"(?:[\w.-]+\s)?§\s?[\d.]*\d")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def defines(source: str, name: str) -> bool:
    """Whether Python `source` defines `name` at any level (def, class, assignment, import,
    a line of a parenthesized import)."""
    pattern = (
        rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^\s*{name}\s*[:=]|\bimport\b.*\b{name}\b"
        rf"|^\s+(?:\w+\s+as\s+)?{name},?\s*(?:#.*)?$"
    )
    return re.search(pattern, source, re.M) is not None


@cache
def defined_tests() -> frozenset[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        names.update(re.findall(r"^\s*(?:async\s+)?def\s+(test_\w+)", path.read_text(), re.M))
    return frozenset(names)


@cache
def defined_test_files() -> frozenset[str]:
    return frozenset(path.name for path in (ROOT / "tests").rglob("test_*.py"))


def module_file(parts: list[str]) -> Path | None:
    """The file of the module `parts` names (a .py or a package's __init__.py), if any."""
    base = ROOT.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def dotted_problem(dotted: str) -> str | None:
    if dotted in FILE_NAMES:
        return None
    parts = dotted.split(".")
    for size in range(len(parts), 0, -1):
        found = module_file(parts[:size])
        if found is None:
            continue
        rest = parts[size:]
        if not rest or defines(found.read_text(), rest[0]):
            return None
        return f"{dotted}: {found.relative_to(ROOT)} defines no {rest[0]}"
    return f"{dotted}: no such module"


def path_problem(path: str, name: str | None) -> str | None:
    target = ROOT / path
    if not target.exists():
        return f"{path}: no such file"
    if name is not None and not defines(target.read_text(), name):
        return f"{path}::{name}: the file defines no {name}"
    return None


def problems_in(text: str) -> Iterator[str]:
    """What `text` (Markdown) names that does not exist, one line each."""
    for number, line in enumerate(text.splitlines(), 1):
        found = []
        for match in PATH.finditer(line):
            name = match.group(2)[2:] if match.group(2) else None
            found.append(path_problem(match.group(1).rstrip("."), name))
        found += [path_problem(m.group(1), None) for m in DOC_PATH.finditer(line)]
        found += [dotted_problem(m.group(1)) for m in DOTTED.finditer(line)]
        found += [
            f"{m.group(0)}: cites a section of a document the repository does not hold"
            for m in SECTION.finditer(line)
        ]
        for bare in BARE_FILE.findall(line):
            found.append(None if bare in defined_test_files() else f"{bare}: no such test file")
        for test in BARE_TEST.findall(line):
            found.append(None if test in defined_tests() else f"{test}: no such test")
        yield from (f"line {number}: {problem}" for problem in found if problem)


@pytest.mark.parametrize("document", documents(), ids=lambda path: path.name)
def test_every_reference_exists(document: Path) -> None:
    problems = list(problems_in(document.read_text(encoding="utf-8")))
    assert not problems, f"{document.relative_to(ROOT)} names what does not exist:\n" + "\n".join(
        problems
    )


def test_the_walk_finds_what_is_missing() -> None:
    text = (
        "shown by `tests/compat/test_attach_ssh_members.py` and "
        "`tests/test_docs_references.py::test_no_such_thing`, printed by `bench/nothing.py`,\n"
        "in `reconciler.engine.hostkeys.no_such_function` and `reconciler.nowhere`; see "
        "`test_nothing_like_it` in test_missing_file.py\n"
        "real: `tests/test_docs_references.py::test_every_reference_exists`, `bench/plan.py`, "
        "`reconciler.engine.hostkeys.host_keys_text`, `test_the_walk_finds_what_is_missing`, "
        "`tests/e2e/test_*.py`, `<data-dir>/agent.lock`, agent.log\n"
        "see docs/nowhere.md and `examples/no-repo`, dstack's rules (reference §1.9);\n"
        "real: docs/fleets.md, `examples/config-repo`, 40 docs/s\n"
    )
    problems = list(problems_in(text))
    assert problems == [
        "line 1: tests/compat/test_attach_ssh_members.py: no such file",
        "line 1: tests/test_docs_references.py::test_no_such_thing: the file defines no "
        "test_no_such_thing",
        "line 1: bench/nothing.py: no such file",
        "line 2: reconciler.engine.hostkeys.no_such_function: "
        "reconciler/engine/hostkeys.py defines no no_such_function",
        "line 2: reconciler.nowhere: reconciler/__init__.py defines no nowhere",
        "line 2: test_missing_file.py: no such test file",
        "line 2: test_nothing_like_it: no such test",
        "line 4: docs/nowhere.md: no such file",
        "line 4: examples/no-repo: no such file",
        "line 4: reference §1.9: cites a section of a document the repository does not hold",
    ]
