"""`dockyard offer` lists the project's offers: its fleets' instances, and catalog offers only
on the backends of its cloud fleets (a project with local or SSH capacity gets none)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from reconciler.adapters.db.models import Fleet, Instance
from tests.cli.conftest import Cli
from tests.web.fakes import FakeController
from tests.web.serving import running_server


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    with running_server(tmp_path, lambda _settings, store: FakeController(store)) as server:
        env = {
            "DOCKYARD_CONFIG": str(server.settings.cli_config),
            "HOME": str(tmp_path / "home"),
            "DOCKYARD_PROJECT": "",
            "COLUMNS": "200",
        }
        yield Cli(server, env)


LOCAL = "type: fleet\nname: local\nnodes: 1\n"
CLOUD = "type: fleet\nname: cloud\nnodes: 0..2\nbackends: [aws]\n"


def _apply(cli: Cli, tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / f"{name}.dstack.yml"
    path.write_text(text)
    applied = cli("apply", "-f", str(path), "-y", "-d")  # no worker provisions it here
    assert applied.exit_code == 0, applied.stderr + applied.stdout


def _add_instance(cli: Cli, fleet_name: str) -> None:
    """An idle 8-CPU, 2xL4 instance in the fleet, as the fleet's engine records it."""
    with cli.server.server.store.writing() as session:
        fleet = session.scalars(select(Fleet).where(Fleet.name == fleet_name)).one()
        gpus = [{"name": "L4", "memory_mib": 23034, "vendor": "nvidia"}] * 2
        session.add(
            Instance(
                fleet_id=fleet.id,
                project_id=fleet.project_id,
                name=f"{fleet_name}-0",
                status="idle",
                created_at=datetime.now(UTC),
                backend="local",
                price=0.0,
                resources={"cpus": 8, "memory_gb": 32, "disk_gb": 100, "gpus": gpus},
                host_info={"cpus": 8, "memory_mib": 32768, "disk_mib": 102400, "gpus": gpus},
                hostname="127.0.0.1",
            )
        )


def _offers(cli: Cli, *args: str) -> list[dict[str, object]]:
    result = cli("offer", "--json", *args)
    assert result.exit_code == 0, result.stderr + result.stdout
    offers: list[dict[str, object]] = json.loads(result.stdout)
    return offers


def test_a_project_with_only_local_capacity_gets_no_cloud_offers(cli: Cli, tmp_path: Path) -> None:
    _apply(cli, tmp_path, "local", LOCAL)
    _add_instance(cli, "local")
    offers = _offers(cli)
    assert offers and {o["backend"] for o in offers} == {"local"}
    assert [o["instance"] for o in offers] == ["local-0"]
    assert _offers(cli, "--gpu", "L4:2") != []
    assert _offers(cli, "--gpu", "H100") == []
    table = cli("offer").stdout
    assert table.split("\n")[0].split() == [
        "#",
        "BACKEND",
        "RESOURCES",
        "INSTANCE",
        "TYPE",
        "PRICE",
    ]
    assert "local-0" in table and "aws" not in table and "gcp" not in table


def test_a_cloud_fleet_brings_catalog_offers_of_its_backends_only(cli: Cli, tmp_path: Path) -> None:
    _apply(cli, tmp_path, "cloud", CLOUD)
    offers = _offers(cli, "--gpu", "A100", "--max-offers", "500")
    assert offers and {o["backend"] for o in offers} == {"aws"}
    assert _offers(cli, "--gpu", "A100", "-b", "gcp") == []


def test_without_a_project_the_catalog_is_explicit(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from reconciler.cli.main import build_app

    env = {"DOCKYARD_CONFIG": str(tmp_path / "none.yml"), "DOCKYARD_PROJECT": ""}
    result = CliRunner().invoke(build_app(), ["offer"], env=env)
    assert result.exit_code != 0 and "--catalog" in str(result.exception)
    catalog = CliRunner().invoke(build_app(), ["offer", "--catalog", "--json"], env=env)
    assert catalog.exit_code == 0 and {"aws", "gcp"} <= {
        o["backend"] for o in json.loads(catalog.stdout)
    }


def test_cpu_memory_disk_and_fleet_filters(cli: Cli, tmp_path: Path) -> None:
    """dstack's `offer` flags: resources ranges narrow the instances and the catalog;
    `--fleet` keeps that fleet's instances and its cloud backends' catalog offers only."""
    _apply(cli, tmp_path, "local", LOCAL)
    _add_instance(cli, "local")
    _apply(cli, tmp_path, "cloud", CLOUD)
    assert [o["instance"] for o in _offers(cli, "--cpu", "8..") if "instance" in o] == ["local-0"]
    assert [o for o in _offers(cli, "--cpu", "9..") if "instance" in o] == []
    assert [o for o in _offers(cli, "--memory", "64GB..") if "instance" in o] == []
    assert [o for o in _offers(cli, "--disk", "200GB..") if "instance" in o] == []
    big = _offers(cli, "--cpu", "96..", "--memory", "512GB..", "--max-offers", "500")
    assert big and all(o["backend"] == "aws" for o in big)
    assert all(float(str(o["cpus"])) >= 96 and float(str(o["memory_gib"])) >= 512 for o in big)
    only_local = _offers(cli, "--fleet", "local", "--max-offers", "500")
    assert [o["backend"] for o in only_local] == ["local"]
    only_cloud = _offers(cli, "--fleet", "cloud", "--gpu", "A100", "--max-offers", "500")
    assert only_cloud and {o["backend"] for o in only_cloud} == {"aws"}
    catalog = cli("offer", "--catalog", "--cpu", "512..", "--json")
    assert catalog.exit_code == 0 and json.loads(catalog.stdout) == []
