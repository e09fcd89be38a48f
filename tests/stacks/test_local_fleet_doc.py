"""docs/clouds.md and the parser agree on how a fleet of this host is declared (issue 26).

The page's example (read from the page itself, so the two cannot drift apart) parses with
the dstack-compatible parser and its normalized spec selects the local engine;
`backends: [local]`, which the page once offered, is refused as dstack 0.22.5 refuses it
(dstack has no `local` backend: its own parser is asked too), and so is a volume on
`backend: local`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from schemas import ConfigError, parse_config
from stacks.protocol import select_engine
from tests.services.missing import need_module

CLOUDS = Path(__file__).resolve().parents[2] / "docs" / "clouds.md"


def _documented_example() -> str:
    text = CLOUDS.read_text(encoding="utf-8")
    after = text.split("A fleet of this host is declared", 1)[1]
    match = re.search(r"```yaml\n(.*?)```", after, re.DOTALL)
    assert match is not None, "docs/clouds.md lost its local fleet example"
    return match.group(1)


def test_the_documented_local_fleet_parses_and_selects_the_local_engine() -> None:
    model = parse_config(_documented_example(), "here.dstack.yml")
    assert (model.type, model.name) == ("fleet", "here")
    choice = select_engine("fleet", model.normalized())
    assert choice.engine == "local", choice


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        ("type: fleet\nname: here\nnodes: 1\nbackends: [local]\n", "backends[0]", 4),
        ("type: volume\nname: data\nbackend: local\nsize: 10GB\n", "backend", 3),
    ],
)
def test_a_local_backend_is_refused_as_dstack_refuses_it(text: str, field: str, line: int) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "x.dstack.yml")
    (problem,) = refused.value.problems
    assert (problem.field, problem.line) == (field, line)
    dstack = need_module("dstack._internal.core.models.configurations")
    with pytest.raises(Exception, match=r"backend") as theirs:
        dstack.parse_apply_configuration(yaml.safe_load(text))
    assert type(theirs.value).__name__ == "ConfigurationError"


def test_dstack_reads_the_documented_example_as_a_fleet() -> None:
    dstack = need_module("dstack._internal.core.models.configurations")
    parsed = dstack.parse_apply_configuration(yaml.safe_load(_documented_example()))
    assert type(parsed).__name__ == "FleetConfiguration" and parsed.name == "here"
