"""YAML text -> Python data plus the composed node tree, with problems for what YAML rejects.

Called by `parsing.parse_config`. Uses PyYAML's libyaml-backed loader when available
(YAML 1.1 like dstack, which reads configs with `yaml.safe_load`) and keeps the node tree
from the same pass, so locating validation errors costs no second parse. Duplicate keys
are errors here (dstack silently keeps the last one); tabs, syntax errors, empty,
non-mapping and multi-document files become `Problem`s with a line and column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from schemas.problems import Problem

_BaseLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"
# First characters of plain scalars that may resolve to something other than a string
# (bool, null, int, float, timestamp, merge, value); anything else is a plain string.
_MAYBE_NOT_STR = frozenset("yYnNtTfFoO~-+0123456789.<=")


class _StrictLoader(_BaseLoader):  # type: ignore[misc]
    """A safe loader that records duplicate mapping keys instead of overwriting them.

    `build` turns the composed node tree into data with less overhead than PyYAML's
    generic constructor; tags other than str/seq/map still go through the constructor.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[yaml.Node] = []

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode:
            if not implicit[0] or (value and value[0] not in _MAYBE_NOT_STR):
                return _STR
        elif kind is yaml.MappingNode:
            return _MAP
        elif kind is yaml.SequenceNode:
            return _SEQ
        return super().resolve(kind, value, implicit)

    def build(self, node: yaml.Node, memo: dict[int, Any]) -> Any:
        if isinstance(node, yaml.ScalarNode):
            return node.value if node.tag == _STR else self.construct_object(node, deep=True)
        if id(node) in memo:
            return memo[id(node)]
        if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
            items: list[Any] = []
            memo[id(node)] = items
            items.extend(self.build(child, memo) for child in node.value)
            return items
        if isinstance(node, yaml.MappingNode) and node.tag == _MAP:
            if any(key.tag == _MERGE for key, _ in node.value):
                return self.construct_object(node, deep=True)
            mapping: dict[Any, Any] = {}
            memo[id(node)] = mapping
            for key_node, value_node in node.value:
                key = self.build(key_node, memo)
                self._check_key(key, key_node, node, mapping)
                mapping[key] = self.build(value_node, memo)
            return mapping
        return self.construct_object(node, deep=True)

    def _check_key(self, key: Any, key_node: yaml.Node, node: yaml.Node, seen: Any) -> None:
        try:
            duplicate = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found an unhashable key",
                key_node.start_mark,
            ) from None  # fmt: skip
        if duplicate:
            self.duplicates.append(key_node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The generic path (mappings with merge keys): also records duplicates."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    self.duplicates.append(key_node)
                seen.add(key)
            except TypeError:
                continue  # unhashable keys are reported by the constructor itself
        result: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return result


@dataclass(frozen=True, slots=True)
class Document:
    """A loaded YAML document: the data, its node tree, and problems YAML itself found."""

    data: Any
    node: yaml.Node | None
    problems: tuple[Problem, ...]


def decode(text: str | bytes, path: str) -> tuple[str, tuple[Problem, ...]]:
    """Bytes -> str (UTF-8, BOM tolerated)."""
    if isinstance(text, str):
        return text, ()
    try:
        return text.decode("utf-8-sig"), ()
    except UnicodeDecodeError as exc:
        line = text[: exc.start].count(b"\n") + 1
        return "", (Problem(path, line, 1, "", "the file is not valid UTF-8"),)


def load_document(text: str, path: str) -> Document:
    """Parse one YAML document; never raises for bad input."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.build(node, {}) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        return Document(None, None, (_marked_problem(exc, text, path),))
    except yaml.YAMLError as exc:
        return Document(None, None, (_unmarked_problem(exc, text, path),))
    except RecursionError:
        return Document(None, None, (Problem(path, 1, 1, "", "the document is nested too deeply"),))
    finally:
        loader.dispose()
    duplicates = tuple(
        Problem(
            path,
            key.start_mark.line + 1,
            key.start_mark.column + 1,
            str(key.value),
            f"duplicate key `{key.value}` (dstack keeps the last one silently; Dockyard "
            "rejects it)",
            "remove one of the two",
        )
        for key in loader.duplicates
    )
    return Document(data, node, duplicates)


def _marked_problem(exc: yaml.MarkedYAMLError, text: str, path: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else 1
    column = mark.column + 1 if mark is not None else 1
    problem = exc.problem or "invalid YAML"
    context = exc.context or ""
    if "single document" in problem + context:
        return Problem(
            path,
            line,
            column,
            "",
            "multi-document files are not supported: one configuration per file",
            "split the documents into separate files",
        )
    tab_line = _tab_indented_line(text, line)
    if tab_line:
        return Problem(
            path,
            tab_line,
            1,
            "",
            "invalid YAML: a tab character is used for indentation",
            "indent with spaces; YAML does not allow tabs",
        )
    message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    return Problem(path, line, column, "", message, None)


def _unmarked_problem(exc: yaml.YAMLError, text: str, path: str) -> Problem:
    position = getattr(exc, "position", None)
    if isinstance(position, int):
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
    else:
        line, column = 1, 1
    reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
    return Problem(path, line, column, "", f"invalid YAML: {reason}")


def _tab_indented_line(text: str, line: int) -> int | None:
    """The line (at or just before the error) whose indentation has a tab, if any."""
    lines = text.splitlines()
    for number in (line, line - 1):
        if 0 < number <= len(lines):
            content = lines[number - 1]
            indent = content[: len(content) - len(content.lstrip(" \t"))]
            if "\t" in indent:
                return number
    return None
