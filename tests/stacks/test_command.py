"""Finding the CLI once at start-up: configured root, PATH, too old; nothing installed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from stacks.pulumi_engine.command import find_pulumi_root, load_command


def _script(folder: Path, body: str) -> Path:
    (folder / "bin").mkdir(parents=True)
    script = folder / "bin" / "pulumi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_found_on_path(fake_pulumi_root: Path, tmp_path: Path) -> None:
    search = str(fake_pulumi_root / "bin")
    assert find_pulumi_root(None, search_path=search, sdk_version="3.272.0") == fake_pulumi_root
    command, availability = load_command(None, search_path=search)
    assert availability and command is not None
    assert str(command.version) == "3.200.0"
    assert command.cancel(str(tmp_path)) is False  # nothing runs there


def test_versioned_home_install_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    root = tmp_path / ".pulumi" / "versions" / "3.272.0"
    _script(root, "echo v3.272.0")
    assert find_pulumi_root(None, search_path="", sdk_version="3.272.0") == root


def test_too_old_cli_is_unavailable(tmp_path: Path) -> None:
    root = tmp_path / "old"
    _script(root, "echo v3.100.0")
    command, availability = load_command(root, search_path="")
    assert command is None
    assert availability.message == "Pulumi CLI 3.100.0 is too old: need >= 3.181"


def test_broken_cli_is_reported_as_not_found(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    _script(root, "exit 3")
    command, availability = load_command(root, search_path="")
    assert command is None and not availability
    assert availability.message.startswith("Pulumi CLI not found")
