"""The conformance corpus (../shared/conformance, dstack 0.22.5's verdicts), read in place.

The corpus is never copied into this repository; tests that need it skip with a reason
when it is absent, and fail under CI=true (tests/services/missing.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.services.missing import need

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO_ROOT.parent / "shared" / "conformance"
CORPUS_HOW = "put dstack 0.22.5's conformance corpus (manifest.json and its files) there"


@dataclass(frozen=True)
class Case:
    name: str
    verdict: str
    type: str | None
    error: str

    @property
    def path(self) -> Path:
        return CORPUS_DIR / self.name

    def read(self) -> bytes:
        return self.path.read_bytes()


@cache
def load_cases() -> tuple[Case, ...]:
    manifest = CORPUS_DIR / "manifest.json"
    if not manifest.is_file():
        return ()
    files = json.loads(manifest.read_text())["files"]
    return tuple(
        Case(name, entry["verdict"], entry["type"], entry.get("error", ""))
        for name, entry in sorted(files.items())
    )


def require_corpus() -> tuple[Case, ...]:
    cases = load_cases()
    need(bool(cases), f"the conformance corpus at {CORPUS_DIR}", CORPUS_HOW)
    return cases


def valid_cases() -> list[Case]:
    return [case for case in load_cases() if case.verdict == "valid"]


def case_ids(cases: list[Case] | tuple[Case, ...]) -> list[str]:
    return [case.name.split("/")[-1][:80] for case in cases]
