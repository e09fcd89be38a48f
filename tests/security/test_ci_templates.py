"""What we ship for CI is safe to copy (issue 12): zizmor finds nothing in the templates.

`.github/actions/plan`, `.github/workflows/` and `examples/.github/workflows/` are audited
by zizmor (the dev extra) offline: actions pinned by full commit SHA, no persisted
checkout credentials, least `permissions:` per job, no template injection. Before this
test: 6 unpinned uses, 2 credential persistences, 1 excessive permission.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.services.missing import need

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = [
    ROOT / ".github" / "actions" / "plan",
    ROOT / ".github" / "workflows",
    ROOT / "examples" / ".github" / "workflows",
]


def _zizmor() -> Path:
    binary = Path(sys.executable).parent / "zizmor"
    need(binary.exists(), "zizmor", "pip install -e '.[dev]'")
    return binary


def test_zizmor_finds_nothing_in_what_we_ship() -> None:
    result = subprocess.run(
        [str(_zizmor()), "--offline", "--no-progress", *map(str, TEMPLATES)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr


def _uses(document: object) -> list[str]:
    found: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key == "uses" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_uses(value))
    elif isinstance(document, list):
        for item in document:
            found.extend(_uses(item))
    return found


def test_every_action_is_pinned_by_a_full_commit_sha() -> None:
    files = [p for folder in TEMPLATES for p in sorted(folder.glob("*.yml"))]
    uses = [use for path in files for use in _uses(yaml.safe_load(path.read_text()))]
    assert len(uses) >= 6
    for use in uses:
        assert use.startswith("./") or re.search(r"@[0-9a-f]{40}$", use), use
