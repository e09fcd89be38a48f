"""Properties: any input raises nothing but `ConfigError`, every problem has a line, and
valid configs survive parse -> normalized -> parse unchanged."""

from __future__ import annotations

import copy
import os
import re
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import CONFIG_TYPES, ConfigError, parse_config
from tests.schemas.corpus import CORPUS_DIR, CORPUS_HOW, valid_cases
from tests.services.missing import needs

SETTINGS = settings(
    max_examples=int(os.environ.get("DOCKYARD_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FIELD_NAMES = [
    "type", "name", "image", "commands", "resources", "gpu", "cpu", "memory", "disk", "env",
    "ports", "port", "volumes", "nodes", "replicas", "groups", "scaling", "probes", "retry",
    "ssh_config", "hosts", "backend", "region", "min", "max", "count", "path", "python",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(
        [
            "A100:40GB:2",
            "24GB..",
            "1..2",
            "2..1",
            "..",
            "5m",
            "off",
            "8080",
            "*:80",
            "a:/b",
            "/a:/b",
            "nvidia:2..4",
            "3.10",
            "x86:4",
            "1TB",
            "K=V",
            "${{ secrets.X }}",
        ]
    ),
)
KEYS = st.one_of(st.sampled_from(FIELD_NAMES), st.text(min_size=1, max_size=8))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=12,
)


def check(text: str | bytes) -> Any:
    """Parse; only `ConfigError` may escape, and its problems must have real positions."""
    try:
        return parse_config(text, "p.dstack.yml")
    except ConfigError as exc:
        assert exc.problems
        source = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        # lines as YAML counts them: \r, \x85, \u2028 and \u2029 break lines too
        last_line = len(re.split(r"\r\n|[\r\n\x85\u2028\u2029]", source))
        for problem in exc.problems:
            assert 1 <= problem.line <= last_line + 1, problem
            assert problem.column >= 1, problem
            assert problem.message
        return None


@SETTINGS
@given(st.text(max_size=200))
def test_random_text_raises_only_config_error(text: str) -> None:
    check(text)


@SETTINGS
@given(st.binary(max_size=100))
def test_random_bytes_raise_only_config_error(data: bytes) -> None:
    check(data)


@SETTINGS
@given(st.sampled_from(CONFIG_TYPES), st.dictionaries(KEYS, VALUES, max_size=6))
def test_random_documents_raise_only_config_error(kind: str, body: dict[str, Any]) -> None:
    document = {"type": kind, **body}
    config = check(yaml.safe_dump(document, allow_unicode=True))
    if config is not None:
        assert_round_trip(config)


def paths_of(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    if not isinstance(data, dict | list):
        return found
    for key, value in data.items() if isinstance(data, dict) else enumerate(data):
        found.append((*prefix, key))
        found.extend(paths_of(value, (*prefix, key)))
    return found


def mutate(document: dict[str, Any], path: tuple[Any, ...], action: str, value: Any) -> None:
    parent: Any = document
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "rename" and isinstance(parent, dict):
        parent[f"{last}x"] = parent.pop(last)
    else:
        parent[last] = value


VALID_DOCUMENTS = [yaml.safe_load(case.read()) for case in valid_cases()]


@needs(bool(VALID_DOCUMENTS), f"the conformance corpus at {CORPUS_DIR}", CORPUS_HOW)
@SETTINGS
@given(st.data())
def test_mutated_valid_configs_raise_only_config_error(data: st.DataObject) -> None:
    document = copy.deepcopy(data.draw(st.sampled_from(VALID_DOCUMENTS)))
    paths = paths_of(document)
    if paths:
        path = data.draw(st.sampled_from(paths))
        action = data.draw(st.sampled_from(["delete", "rename", "set"]))
        mutate(document, path, action, data.draw(VALUES))
    config = check(yaml.safe_dump(document, allow_unicode=True))
    if config is not None:
        assert_round_trip(config)


def assert_round_trip(config: Any) -> None:
    normalized = config.normalized()
    again = parse_config(yaml.safe_dump(normalized, allow_unicode=True), "again.dstack.yml")
    assert again == config
    assert again.normalized() == normalized
