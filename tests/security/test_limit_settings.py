"""Every input bound is a documented setting: a `dockyard server` flag and a variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.adapters.db import Store
from reconciler.cli.main import build_app
from reconciler.engine.controller import build_controller
from reconciler.settings import LIMIT_FIELDS, Settings
from schemas import ConfigError


def test_every_limit_is_a_server_flag_with_its_variable() -> None:
    result = CliRunner().invoke(build_app(), ["server", "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    for name in LIMIT_FIELDS:
        assert f"--{name.replace('_', '-')}" in result.stdout, name
        assert f"DOCKYARD_{name.upper()}" in result.stdout, name


@pytest.mark.parametrize("name", LIMIT_FIELDS)
def test_every_limit_comes_from_its_variable(name: str) -> None:
    settings = Settings.from_env({f"DOCKYARD_{name.upper()}": "4096"})
    assert getattr(settings, name) == 4096


def test_the_config_limits_reach_the_parser_settings() -> None:
    settings = Settings.from_env(
        {"DOCKYARD_CONFIG_MAX_BYTES": "1000", "DOCKYARD_CONFIG_MAX_VALUES": "50"}
    )
    limits = settings.config_limits
    assert (limits.max_bytes, limits.max_values) == (1000, 50)


async def test_a_posted_config_is_read_within_the_server_settings(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", config_max_bytes=200)
    store = Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True)
    try:
        controller = build_controller(settings, store, engines={})
        text = "type: task\nname: big\ncommands:\n" + "  - echo lol\n" * 40
        with pytest.raises(ConfigError, match="config-max-bytes"):
            await controller.plan_unmanaged("main", text=text, path="big.dstack.yml", user="u")
    finally:
        store.close()
