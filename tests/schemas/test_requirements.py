"""The resource grammar is parsed once: `schemas.requirements.resources_of` reads written
and normalized forms alike, and the scheduler and the offers catalog both build on it."""

from __future__ import annotations

import pytest

from reconciler.core.jobspecs import requirements_of
from schemas import parse_config
from schemas.requirements import ANY, Range, Resources, memory_gib, parse_range, resources_of
from stacks.catalog.requirements import requirements_from_spec

TASK = """
type: task
name: train
commands: [echo]
resources:
  cpu: arm:4..
  memory: 24GB..
  disk: 200GB
  gpu: A100:40GB:2
"""


def test_written_and_normalized_forms_give_the_same_resources() -> None:
    written = {"cpu": "arm:4..", "memory": "24GB..", "disk": "200GB", "gpu": "A100:40GB:2"}
    normalized = parse_config(TASK, "t.dstack.yml").normalized()["resources"]
    expected = Resources(
        cpu=Range(4, None),
        cpu_arch="arm",
        memory_gib=Range(24, None),
        disk_gib=Range(200, 200),
        gpu=True,
        gpu_count=Range(2, 2),
        gpu_names=("A100",),
        gpu_vendor=None,
        gpu_memory_gib=Range(40, 40),
    )
    assert resources_of(written) == expected
    parsed = resources_of(normalized)
    assert (parsed.cpu, parsed.cpu_arch, parsed.memory_gib, parsed.disk_gib) == (
        expected.cpu,
        expected.cpu_arch,
        expected.memory_gib,
        expected.disk_gib,
    )
    assert (parsed.gpu_count, parsed.gpu_memory_gib) == (
        expected.gpu_count,
        expected.gpu_memory_gib,
    )
    assert [n.upper() for n in parsed.gpu_names] == ["A100"]


def test_the_scheduler_and_the_catalog_read_the_same_numbers() -> None:
    spec = parse_config(TASK, "t.dstack.yml").normalized()
    placement = requirements_of(spec)
    offers = requirements_from_spec(spec)
    assert placement.cpu == offers.cpus == Range(4, None)
    assert placement.memory_gb == offers.memory_gib == Range(24, None)
    assert placement.gpu_count == offers.gpu_count == Range(2, 2)
    assert placement.gpu_memory_gb == offers.gpu_memory_gib == Range(40, 40)
    assert placement.disk_gb == offers.disk_gib == Range(200, 200)


def test_unset_fields_are_none_and_each_consumer_applies_its_default() -> None:
    assert resources_of({}) == Resources()
    assert requirements_from_spec({}).cpus == ANY
    assert requirements_of({}).cpu == Range(2, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", Range(8, 8)), ("8..", Range(8, None)), ("..16", Range(None, 16)), ("2..8", Range(2, 8))],
)
def test_ranges(text: str, expected: Range) -> None:
    assert parse_range(text) == expected


def test_memory_sizes_are_gib_and_bad_ones_refused() -> None:
    assert memory_gib("512MB") == 0.5
    assert memory_gib("1TB") == 1024
    assert parse_range("24GB..", memory=True).describe("GB") == "24GB.."
    with pytest.raises(ValueError, match="memory size"):
        memory_gib("lots")


@pytest.mark.parametrize(
    "written",
    ["tpu:2", "tt:1", "A100:40GB:2", "2", "H100,A100:80GB..:1..4", "amd:MI300X:192GB:1"],
)
def test_one_gpu_token_grammar_for_the_models_and_the_numbers(written: str) -> None:
    """`resources_of` reads a written GPU spec by the models' own grammar (vendor aliases,
    token kinds), so a spec means the same to the parser and to the scheduler."""
    from schemas.resources import GPUSpec

    model = GPUSpec.model_validate(written).model_dump(mode="json", exclude_none=True)
    assert resources_of({"gpu": written}) == resources_of({"gpu": model})


def test_a_written_gpu_spec_the_models_refuse_is_refused_by_the_numbers_too() -> None:
    for bad in ["A100:H100", "2:4", "A100::2"]:  # two names, two counts, an empty token
        with pytest.raises(ValueError):
            resources_of({"gpu": bad})
