"""Conformance: for each of the 263 corpus files our verdict and type equal dstack 0.22.5's."""

from __future__ import annotations

import json

import pytest
import yaml

from schemas import ConfigError, parse_config, peek_kind
from tests.schemas.corpus import Case, case_ids, load_cases, require_corpus

CASES = load_cases()


def test_corpus_is_complete() -> None:
    cases = require_corpus()
    assert len(cases) == 263
    assert sum(case.verdict == "invalid" for case in cases) == 12


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_verdict_and_type_match_dstack(case: Case) -> None:
    text = case.read()
    try:
        config = parse_config(text, case.name)
    except ConfigError as exc:
        assert case.verdict == "invalid", f"dstack accepts it, we say: {exc}"
        assert peek_kind(text)[0] == case.type
        assert all(problem.line >= 1 and problem.column >= 1 for problem in exc.problems)
        return
    assert case.verdict == "valid", f"dstack rejects it: {case.error[:300]}"
    assert config.type == case.type


VALID = [c for c in CASES if c.verdict == "valid"]


@pytest.mark.parametrize("case", VALID, ids=case_ids(VALID))
def test_valid_configs_round_trip_through_normalized(case: Case) -> None:
    config = parse_config(case.read(), case.name)
    normalized = config.normalized()
    again = parse_config(yaml.safe_dump(normalized), case.name)
    assert again == config
    assert again.normalized() == normalized
    assert again.spec_hash() == config.spec_hash()
    json.dumps(normalized)  # JSON-able
