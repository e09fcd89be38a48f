"""Problems found in a commit's configuration files, with their file position.

`ConfigIssue` is the one shape for everything that stops a commit from being applied:
a `schemas.ConfigError` problem, a duplicate kind+name, an unnamed resource, an invalid
`.dockyard.yml`, an empty snapshot. A plan carries them as its `errors`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem: file path (repo-relative), 1-based line/column when known, the field."""

    path: str
    line: int | None
    column: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        field = f" [{self.field}]" if self.field else ""
        return f"{where}{field}: {self.message}"
