"""Fixtures for the Pulumi driver tests: the fake `pulumi` CLI and engines using it."""

from __future__ import annotations

import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FAKE = Path(__file__).with_name("fake_pulumi.py")
PASSPHRASE = "correct-horse-battery"


@pytest.fixture
def fake_pulumi_root(tmp_path: Path) -> Path:
    """A directory `X` with `X/bin/pulumi` running the fake CLI with this venv's Python."""
    root = tmp_path / "pulumi-cli"
    (root / "bin").mkdir(parents=True)
    script = root / "bin" / "pulumi"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return root


@pytest.fixture
def pulumi_engine(tmp_path: Path, fake_pulumi_root: Path) -> Iterator[object]:
    from stacks.pulumi_engine.engine import PulumiEngine, PulumiSettings
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
