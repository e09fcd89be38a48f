"""Config inputs are bounded before they are expanded (issue 12, findings 3 and 12).

The attack forms: a "billion laughs" alias bomb at 12 levels, a 20 MB `.dstack.yml`, a
document nested thousands of levels deep, a 1 MiB value echoed back in an error. Each is
refused by `parse_config` with a problem that names the limit and how to raise it, at a
cost (traced memory, values expanded) that does not grow with what the file asks for.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import ConfigError, parse_config, peek_kind
from schemas.limits import DEFAULT_LIMITS, MAX_CONFIG_BYTES, ConfigLimits
from schemas.parsing import MAX_PROBLEMS

MiB = 1024 * 1024


def alias_bomb(levels: int, width: int = 9, field: str = "volumes") -> str:
    """`levels` anchors, each a list of `width` aliases of the one before (width**levels)."""
    anchors = ["&a0 [" + ", ".join(['"lol"'] * width) + "]"]
    anchors += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    body = "\n".join(f"  - {anchor}" for anchor in anchors)
    return f"type: task\ncommands: [echo]\n{field}:\n{body}\n"


def traced(call: Callable[[], Any]) -> tuple[Any, int]:
    """`(result or the ConfigError raised, peak bytes traced)`."""
    tracemalloc.start()
    try:
        try:
            result: Any = call()
        except ConfigError as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("field", ["volumes", "ports", "files", "env"])
def test_alias_bomb_at_12_levels_is_refused_before_expansion(field: str) -> None:
    text = alias_bomb(12, field=field)  # 9**12 = 282 billion strings
    assert len(text) < 1000
    error, peak = traced(lambda: parse_config(text, "bomb.dstack.yml"))
    assert isinstance(error, ConfigError)
    (problem,) = error.problems
    assert problem.path == "bomb.dstack.yml"
    assert f"more than {DEFAULT_LIMITS.max_values} values" in problem.message
    assert "config-max-values" in problem.message
    assert problem.hint is not None and "DOCKYARD_CONFIG_MAX_VALUES" in problem.hint
    assert peak < 5 * MiB


def test_aliases_within_the_budget_still_work() -> None:
    text = "type: task\ncommands: [echo]\nx-env: &common\n  A: '1'\n  B: '2'\nenv: *common\n"
    error, _ = traced(lambda: parse_config(text, "ok.dstack.yml"))
    assert isinstance(error, ConfigError)  # `x-env` is not a dstack field...
    assert "x-env" in str(error) and "values" not in str(error)  # ...but the aliases are fine


def test_the_value_budget_is_a_setting() -> None:
    text = alias_bomb(3, width=3)  # 3 + 9 + 27 strings
    with pytest.raises(ConfigError, match="more than 20 values"):
        parse_config(text, "small.dstack.yml", ConfigLimits(max_values=20))


@pytest.mark.parametrize("as_bytes", [True, False])
def test_a_20_mb_config_is_refused_by_its_size(as_bytes: bool) -> None:
    text = "type: task\ncommands:\n" + "  - echo lol\n" * (20 * MiB // 13)
    data: str | bytes = text.encode() if as_bytes else text
    error, peak = traced(lambda: parse_config(data, "big.dstack.yml"))
    assert isinstance(error, ConfigError)
    (problem,) = error.problems
    assert f"over the limit of {MAX_CONFIG_BYTES} bytes" in problem.message
    assert "config-max-bytes" in problem.message
    assert problem.hint is not None and "DOCKYARD_CONFIG_MAX_BYTES" in problem.hint
    assert peak < 2 * MiB  # nothing decoded or composed
    assert peek_kind(data) == (None, None)


def test_deep_nesting_is_refused() -> None:
    lines = [f"{'  ' * depth}k{depth}:" for depth in range(200)]
    text = "type: task\ncommands: [echo]\nenv:\n" + "\n".join("  " + line for line in lines)
    with pytest.raises(ConfigError, match="nests deeper than 64 levels") as caught:
        parse_config(text, "deep.dstack.yml")
    assert "DOCKYARD_CONFIG_MAX_DEPTH" in str(caught.value)
    flow = "type: task\ncommands: " + "[" * 100_000 + "]" * 100_000
    with pytest.raises(ConfigError, match="nest"):
        parse_config(flow, "flow.dstack.yml")


def test_error_excerpts_are_truncated() -> None:
    long_name = "a" * (MiB - 100)
    error, _ = traced(lambda: parse_config(f"type: task\nname: {long_name}\n", "n.dstack.yml"))
    assert isinstance(error, ConfigError)
    assert len(str(error)) < 500
    nested = "type: task\ncommands: [echo]\nvolumes:\n  - " + "[" * 30 + "x" + "]" * 30 + "\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(nested, "v.dstack.yml")
    assert len(str(caught.value)) < 500


def test_problems_are_capped() -> None:
    text = "type: task\ncommands: [echo]\nports:\n" + "  - [a]\n" * 3000
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "p.dstack.yml")
    problems = caught.value.problems
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1].message == f"... and {3000 - MAX_PROBLEMS} more problems"


def _expanded(value: Any, cap: int) -> int:
    """How many values `value` has with shared (aliased) parts counted each time, up to cap."""
    count, stack = 0, [value]
    while stack and count <= cap:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _repeat(unit: str, prefix: str) -> str:
    """`prefix` then `unit` repeated to just under 1 MiB."""
    return prefix + unit * ((MiB - len(prefix) - 1) // len(unit))


HOSTILE = st.one_of(
    st.builds(
        alias_bomb,
        st.integers(1, 16),
        st.integers(1, 12),
        st.sampled_from(["volumes", "ports", "env", "commands", "files"]),
    ),
    st.builds(
        _repeat,
        st.sampled_from(["- a\n", "- [a]\n", "- {a: b}\n", "  - *x\n", "a,", "[", "{a: "]),
        st.sampled_from(
            [
                "type: task\ncommands:\n",
                "type: task\ncommands: [echo]\nports:\n",
                "x: &x [1, 2, 3]\ntype: task\nenv:\n",
                "type: task\ncommands: [",
            ]
        ),
    ),
    st.builds(
        lambda n, key: (
            "type: task\ncommands: [echo]\nenv:\n" + "".join(f"  {key}{i}: v\n" for i in range(n))
        ),
        st.integers(0, 60_000),
        st.sampled_from(["K", "k-", "1"]),
    ),
    st.builds(lambda n: "type: task\nname: " + "a" * n, st.integers(0, MiB - 20)),
)


@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(HOSTILE)
def test_no_config_under_1_mib_costs_more_than_its_budget(text: str) -> None:
    """Property: under 1 MiB, parse_config stays within 100 MB and `max_values` values.

    Time follows from the value budget (bench/bounds.py measures seconds per file at the
    limits); the test checks the budget, not the clock.
    """
    assert len(text.encode()) < MiB
    result, peak = traced(lambda: parse_config(text, "p.dstack.yml"))
    assert peak < 100 * 1000 * 1000
    if isinstance(result, ConfigError):
        assert len(result.problems) <= MAX_PROBLEMS + 1
        assert len(str(result)) < (MAX_PROBLEMS + 1) * 1000
    else:
        data = result.model_dump()
        assert _expanded(data, 4 * DEFAULT_LIMITS.max_values) <= 4 * DEFAULT_LIMITS.max_values
