"""`dockyard offer --catalog`: table, JSON and grouping over the built-in catalog."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from reconciler.cli.main import build_app
from stacks.catalog import list_offers

RUNNER = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = RUNNER.invoke(build_app(), ["offer", "--catalog", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_table_cheapest_first() -> None:
    code, output = _run("--gpu", "A100:80GB:8", "--spot-policy", "on-demand")
    assert code == 0, output
    lines = [line for line in output.splitlines() if "A100" in line]
    assert "p4de.24xlarge" in lines[0] and "$27.447" in lines[0]
    assert "a2-ultragpu-8g" in lines[1]
    assert "cpu=96 mem=1152GB gpu=A100:80GB:8" in lines[0]


def test_json_output_matches_the_pure_search() -> None:
    code, output = _run("--gpu", "L4", "--backend", "gcp", "--json")
    assert code == 0, output
    data = json.loads(output)
    expected = list_offers(gpu="L4", backends=["gcp"])
    assert [(d["instance_type"], d["spot"], d["price"]) for d in data] == [
        (o.instance_type, o.spot, o.price) for o in expected
    ]
    assert data[0]["spot"] is True and data[0]["gpu"]["name"] == "L4"


def test_group_by_gpu_and_backend() -> None:
    code, output = _run("--gpu", "A100", "--group-by", "gpu,backend", "--json")
    assert code == 0, output
    groups = json.loads(output)
    assert {(g["gpu"], g["backend"]) for g in groups} == {
        ("A100:40GB", "aws"),
        ("A100:80GB", "aws"),
        ("A100:40GB", "gcp"),
        ("A100:80GB", "gcp"),
    }
    code, table = _run("--gpu", "A100", "--group-by", "gpu,backend")
    assert code == 0 and "OFFERS" in table and "A100:80GB" in table


def test_bad_flags_are_usage_errors() -> None:
    code, _ = _run("--group-by", "zone")
    assert code != 0
    code, _ = _run("--spot-policy", "cheap")
    assert code != 0
