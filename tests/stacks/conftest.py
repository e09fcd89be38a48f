"""Fixtures for the Pulumi driver tests: the fake `pulumi` CLI and engines using it."""

from __future__ import annotations

import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PASSPHRASE = "correct-horse-battery"


@pytest.fixture
def fake_pulumi_root(tmp_path: Path) -> Path:
    """A directory `X` with `X/bin/pulumi` running the fake CLI with this venv's Python."""
    root = tmp_path / "pulumi-cli"
    (root / "bin").mkdir(parents=True)
    script = root / "bin" / "pulumi"
    command = f'exec "{sys.executable}" -m tests.stacks.fake_pulumi.cli "$@"'
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" {command}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return root


@pytest.fixture
def pulumi_engine(tmp_path: Path, fake_pulumi_root: Path) -> Iterator[object]:
    from stacks.pulumi_engine.engine import PulumiEngine
    from stacks.pulumi_engine.settings import PulumiSettings
    from tests.stacks.programs import SETTINGS

    settings = PulumiSettings(
        data_dir=tmp_path / "data",
        programs=SETTINGS,
        passphrase=PASSPHRASE,
        pulumi_root=fake_pulumi_root,
    )
    engine = PulumiEngine.create(settings)
    yield engine
    engine.shutdown()
