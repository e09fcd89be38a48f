"""The JSON Schema of `.dockyard.yml` (`schemas/json/dockyard.json`) accepts what the
policy parser accepts — the example config repo's, the docs' examples, durations as
strings — and refuses what it refuses (unknown keys, wrong types)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from reconciler.cli.schema import DEFAULT_DIR
from reconciler.core.policy import RepoPolicy, parse_policy
from tests.services.missing import need_module

ROOT = Path(__file__).resolve().parents[2]


def _validator() -> Any:
    jsonschema = need_module(
        "jsonschema", "pip install -e '.[dev]' (scripts/setup.sh --dev installs it)"
    )
    schema = json.loads((DEFAULT_DIR / "dockyard.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _docs_examples() -> list[str]:
    text = (ROOT / "docs" / "policies.md").read_text(encoding="utf-8")
    return [block for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def test_the_example_repo_and_the_docs_examples_are_valid() -> None:
    validator = _validator()
    documents = [(ROOT / "examples" / "config-repo" / ".dockyard.yml").read_text()]
    documents += _docs_examples()
    assert len(documents) >= 3
    for text in documents:
        assert isinstance(parse_policy(text), RepoPolicy), text
        errors = list(validator.iter_errors(yaml.safe_load(text)))
        assert not errors, (text, [e.message for e in errors])


def test_durations_as_strings_and_what_the_parser_refuses() -> None:
    validator = _validator()
    good = {"fetch_interval": "5m", "policy": {"runs": {"max_duration": "24h", "gpus": ["H100"]}}}
    assert validator.is_valid(good) and isinstance(parse_policy(yaml.safe_dump(good)), RepoPolicy)
    for bad in (
        {"policy": {"runs": {"max_gpu": 8}}},  # misspelt
        {"policy": {"budget": {"hourly": "lots"}}},
        {"policy": {"approvers": ["not a login!"]}},
        {"policy": {"runs": {"max_duration": "a day"}}},
        {"prune": {"volumes": "shred"}},
    ):
        assert not validator.is_valid(bad), bad
        assert not isinstance(parse_policy(yaml.safe_dump(bad)), RepoPolicy), bad


def test_dockyard_schema_prints_it() -> None:
    from typer.testing import CliRunner

    from reconciler.cli.main import build_app

    result = CliRunner().invoke(build_app(), ["schema", "--type", "dockyard"])
    assert result.exit_code == 0
    assert result.stdout == (DEFAULT_DIR / "dockyard.json").read_text(encoding="utf-8")
