"""What a bad configuration looks like to the caller: `Problem` and `ConfigError`.

`parse_config` raises one `ConfigError` carrying every `Problem` it found; the CLI
(`dockyard validate`), the reconciler's loader and the PR plan comment render them.
Lines and columns are 1-based and point at the offending key or value.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

EXCERPT_CHARS = 80

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxtuple = _REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 4
_REPR.maxstring = _REPR.maxother = EXCERPT_CHARS


def excerpt(value: Any) -> str:
    """A bounded `repr` for error messages: never formats a whole (alias-expanded) value.

    Nested containers show their first items only and the text is cut to
    `EXCERPT_CHARS`, so an error costs the same whatever the value's size.
    """
    text = _REPR.repr(value)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one configuration file."""

    path: str
    line: int
    column: int
    field: str
    message: str
    hint: str | None = None

    def format(self) -> str:
        """`file:line:col: field: message (hint)` — the one-line form people read."""
        where = f"{self.path}:{self.line}:{self.column}"
        text = (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )
        return f"{text} ({self.hint})" if self.hint else text

    def to_json(self) -> dict[str, object]:
        return {
            "line": self.line,
            "column": self.column,
            "field": self.field,
            "message": self.message,
            "hint": self.hint,
        }


class ConfigError(Exception):
    """A configuration could not be parsed; `problems` lists every problem found, in order."""

    def __init__(self, problems: tuple[Problem, ...] | list[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(p.format() for p in self.problems))

    @property
    def path(self) -> str:
        return self.problems[0].path if self.problems else ""
