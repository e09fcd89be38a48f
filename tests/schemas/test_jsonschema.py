"""The committed JSON Schema files equal what the models generate, and accept the corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import Field

from reconciler.cli.schema import DEFAULT_DIR, all_schemas, stale_files
from schemas import CONFIG_TYPES
from schemas.base import StrictModel
from schemas.jsonschema import COMBINED_NAME, DocumentedSchema
from tests.schemas.corpus import Case, case_ids, valid_cases
from tests.services.missing import need_module


def test_committed_schema_files_are_current() -> None:
    stale = stale_files(all_schemas(), DEFAULT_DIR)
    assert not stale, f"stale {stale}: run `dockyard schema --write`"


def test_there_is_one_file_per_type_a_combined_one_and_the_policy() -> None:
    names = {path.name for path in Path(DEFAULT_DIR).glob("*.json")}
    expected = {f"{kind}.json" for kind in CONFIG_TYPES} | {f"{COMBINED_NAME}.json"}
    assert names == expected | {"dockyard.json"}  # and the repo policy's (.dockyard.yml)


VALID = valid_cases()


@pytest.mark.parametrize("case", VALID, ids=case_ids(VALID))
def test_combined_schema_accepts_every_valid_corpus_file(case: Case) -> None:
    jsonschema = need_module(
        "jsonschema", "pip install -e '.[dev]' (scripts/setup.sh --dev installs it)"
    )
    schema = json.loads((Path(DEFAULT_DIR) / f"{COMBINED_NAME}.json").read_text())
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(yaml.safe_load(case.read())))
    assert not errors, jsonschema.exceptions.best_match(errors).message


def test_combined_schema_rejects_unknown_keys_and_types() -> None:
    jsonschema = need_module(
        "jsonschema", "pip install -e '.[dev]' (scripts/setup.sh --dev installs it)"
    )
    schema = json.loads((Path(DEFAULT_DIR) / f"{COMBINED_NAME}.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    assert not validator.is_valid({"type": "task", "comands": ["x"]})
    assert not validator.is_valid({"type": "tsk"})
    assert validator.is_valid({"type": "task", "commands": ["x"], "resources": {"gpu": "A100:2"}})


class _Parent(StrictModel):
    kept: int = 0
    """Inherited as is."""
    redeclared: int = 0
    """The parent's word."""


class _Child(_Parent):
    redeclared: int = 1
    explicit: int = Field(default=0, description="From Field.")
    """Not this one."""
    own: str = ""
    """Line one.

    Line two."""


def test_field_docstrings_become_descriptions_as_pydantic_made_them() -> None:
    # what `use_attribute_docstrings=True` gave, read only when a schema is made
    properties = _Child.model_json_schema(schema_generator=DocumentedSchema)["properties"]
    assert properties["kept"]["description"] == "Inherited as is."
    assert "description" not in properties["redeclared"]  # declared again, without a doc
    assert properties["explicit"]["description"] == "From Field."
    assert properties["own"]["description"] == "Line one.\n\nLine two."
    assert "description" not in _Child.model_json_schema()["properties"]["own"]
