"""No `pulumi` CLI on this host (the normal case here): clear message, nothing crashes.

End to end through `build_engines`: cloud resources are blocked with the exact message,
every Pulumi operation raises `StackUnavailable`, local and SSH resources still work.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stacks.engines import build_engines
from stacks.local import LocalSettings
from stacks.protocol import PULUMI_NOT_FOUND, StackUnavailable, StackUnsupported
from stacks.pulumi_engine.engine import PulumiEngine
from stacks.pulumi_engine.settings import PulumiSettings
from tests.stacks.programs import SETTINGS, fleet, resource

MESSAGE = (
    "Pulumi CLI not found: install it (https://www.pulumi.com/docs/install/) "
    "or use SSH/local fleets"
)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PulumiSettings:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    empty = tmp_path / "empty-path"
    empty.mkdir()
    return PulumiSettings(
        data_dir=tmp_path / "data",
        programs=SETTINGS,
        passphrase="never-shown-passphrase",
        search_path=str(empty),
    )


async def test_engine_without_cli_is_unavailable(settings: PulumiSettings) -> None:
    engine = PulumiEngine.create(settings)
    availability = engine.available()
    assert not availability
    assert availability.message == MESSAGE == PULUMI_NOT_FOUND
    res = fleet("gpu", {"backends": ["aws"], "resources": {"gpu": "L4"}})
    for op in (engine.preview, engine.up, engine.refresh, engine.destroy):
        with pytest.raises(StackUnavailable, match="Pulumi CLI not found"):
            await op(res)
    assert not (settings.data_dir / "pulumi").exists()
    engine.shutdown()


def test_configured_root_without_binary_is_unavailable(
    settings: PulumiSettings, tmp_path: Path
) -> None:
    from dataclasses import replace

    engine = PulumiEngine.create(replace(settings, pulumi_root=tmp_path / "nowhere"))
    assert engine.available().message == MESSAGE
    engine.shutdown()


def test_passphrase_never_in_repr(settings: PulumiSettings) -> None:
    assert "never-shown-passphrase" not in repr(settings)


async def test_plan_blocks_cloud_resources_and_local_ones_still_work(
    settings: PulumiSettings, tmp_path: Path
) -> None:
    engines = build_engines(LocalSettings(data_dir=tmp_path / "data", user="u"), settings)
    cloud = fleet("gpu", {"backends": ["gcp"], "resources": {"gpu": "A100"}})
    assert engines.blocked_reason("fleet", cloud.spec) == MESSAGE
    assert engines.blocked_reason("volume", {"backend": "aws", "region": "us-east-1"}) == MESSAGE
    with pytest.raises(StackUnavailable, match="Pulumi CLI not found"):
        engines.for_resource(cloud)

    assert engines.blocked_reason("fleet", {"ssh_config": {"hosts": ["h1"]}}) is None
    assert dict(engines) == {"local": engines.local, "pulumi": engines.pulumi}
    assert engines["pulumi"].available().message == MESSAGE
    volume = resource("volume", "data", {"backend": "local"})
    assert engines.blocked_reason("volume", volume.spec) is None
    out = await engines.for_resource(volume).up(volume)
    assert out["path"].endswith("volumes/main/data")
    assert await asyncio.to_thread(Path(out["path"]).is_dir)

    odd = resource("fleet", "odd", {"backends": ["vastai"]})
    assert "vastai is not supported" in (engines.blocked_reason("fleet", odd.spec) or "")
    with pytest.raises(StackUnsupported, match="fleet 'odd'"):
        engines.for_resource(odd)


def test_engines_without_pulumi_settings_and_without_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    engines = build_engines(LocalSettings(data_dir=tmp_path, user="u"), None)
    assert engines.blocked_reason("gateway", {"backend": "aws"}) == MESSAGE


def test_engines_without_pulumi_settings_but_with_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_pulumi_root: Path
) -> None:
    monkeypatch.setenv("PATH", str(fake_pulumi_root / "bin"))
    engines = build_engines(LocalSettings(data_dir=tmp_path, user="u"), None)
    reason = engines.blocked_reason("gateway", {"backend": "aws"})
    assert reason is not None and "passphrase" in reason


def test_local_path_imports_no_pulumi() -> None:
    import subprocess
    import sys

    code = (
        "import sys, stacks.engines, stacks.local, stacks.catalog; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'grpc'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
