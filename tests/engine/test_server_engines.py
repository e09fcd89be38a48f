"""The server's stacks engines from its settings (reconciler.engine.engines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.engine.engines import server_engines
from reconciler.settings import Settings
from stacks.protocol import StackResource

NOT_FOUND = (
    "Pulumi CLI not found: install it (https://www.pulumi.com/docs/install/) "
    "or use SSH/local fleets"
)
AWS_FLEET = {"type": "fleet", "name": "gpu", "backends": ["aws"], "nodes": {"min": 1}}


def test_with_a_passphrase_and_no_cli_cloud_resources_are_blocked_with_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a host without the CLI, whatever this one has: nothing on PATH, no ~/.pulumi/versions
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = Settings.from_env({"DOCKYARD_PULUMI_PASSPHRASE": "correct horse"}, data_dir=tmp_path)
    engines = server_engines(settings)
    assert engines.blocked_reason("fleet", AWS_FLEET) == NOT_FOUND
    assert engines.blocked_reason("fleet", {"type": "fleet", "name": "local"}) is None
    assert "correct horse" not in repr(settings)


def test_without_a_passphrase_cloud_resources_are_blocked(tmp_path: Path) -> None:
    engines = server_engines(Settings.from_env({}, data_dir=tmp_path))
    reason = engines.blocked_reason("fleet", AWS_FLEET)
    assert reason is not None
    assert "Pulumi" in reason


async def test_a_local_gateways_url_is_the_external_url_when_set(tmp_path: Path) -> None:
    """Users are shown the address they reach, not the one the server binds."""
    gateway = StackResource("main", "gateway", "gw", "gw.dstack.yml", {"domain": "example.com"})
    env = {"DOCKYARD_EXTERNAL_URL": "https://dockyard.example.com/"}
    shown = await server_engines(Settings.from_env(env, data_dir=tmp_path)).local.up(gateway)
    assert shown["url"] == "https://dockyard.example.com/proxy/services/main/"
    bound = await server_engines(Settings.from_env({}, data_dir=tmp_path / "b")).local.up(gateway)
    assert str(bound["url"]).startswith("http://127.0.0.1:")
