"""`dockyard fleet|volume|gateway` list with dstack's columns (a real server, fake runtime)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import Cli

CLOUD = """type: fleet
name: gpus
nodes: 0..2
spot_policy: spot
max_price: 3
resources:
  gpu: A100:80GB:2
"""
SSH = """type: fleet
name: hosts
ssh_config:
  user: ubuntu
  identity_file: {key}
  hosts: [10.0.0.1, 10.0.0.2]
"""


def _apply(cli: Cli, tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / f"{name}.dstack.yml"
    path.write_text(text)
    applied = cli("apply", "-f", str(path), "-y", "-d")  # no worker provisions it here
    assert applied.exit_code == 0, applied.stderr + applied.stdout


def test_fleet_columns_are_dstacks(cli: Cli, tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("not a real key\n")
    _apply(cli, tmp_path, "gpus", CLOUD)
    _apply(cli, tmp_path, "hosts", SSH.format(key=key))
    lines = cli("fleet").stdout.splitlines()
    assert lines[0].split() == [
        "NAME", "NODES", "GPU", "SPOT", "BACKEND", "PRICE", "STATUS", "CREATED",
    ]  # fmt: skip
    (cloud,) = [line.split() for line in lines if line.startswith("gpus")]
    assert cloud[:6] == ["gpus", "0..2", "A100:80GB:2", "spot", "*", "$0..3"]
    assert cloud[-1] == "ago"
    (ssh,) = [line.split() for line in lines if line.startswith("hosts")]
    assert ssh[:3] == ["hosts", "2", "ssh"]
    listed = [_without_created(line) for line in cli("fleet", "list").stdout.splitlines()]
    assert listed == [_without_created(line) for line in lines]


def _without_created(line: str) -> list[str]:
    """A table row's cells without its CREATED age (`3 sec ago`), which may tick between
    two listings; fleet and instance rows have different numbers of cells before it."""
    cells = line.split()
    return cells[:-3] if cells[-1:] == ["ago"] else cells


def test_volume_and_gateway_columns_are_dstacks(cli: Cli) -> None:
    assert cli("volume").stdout.split() == ["NAME", "BACKEND", "STATUS", "CREATED"]
    assert cli("gateway", "list").stdout.split() == [
        "NAME", "BACKEND", "HOSTNAME", "DOMAIN", "DEFAULT", "STATUS",
    ]  # fmt: skip


def test_verbose_columns(cli: Cli, tmp_path: Path) -> None:
    text = CLOUD + "  cpu: 8..\n  memory: 32GB..64GB\nplacement: cluster\n"
    _apply(cli, tmp_path, "gpus", text)
    lines = cli("fleet", "-v").stdout.splitlines()
    assert lines[0].split() == [
        "NAME", "NODES", "RESOURCES", "SPOT", "BACKEND", "PRICE", "STATUS", "CREATED", "ERROR",
    ]  # fmt: skip
    (row,) = [line for line in lines if line.startswith("gpus")]
    assert "0..2 (cluster)" in row and "cpu=8.. mem=32GB..64GB disk=100GB.. gpu=A100:80GB:2" in row
    assert cli("volume", "list", "-v").stdout.split() == [
        "NAME", "BACKEND", "REGION", "STATUS", "CREATED", "ERROR",
    ]  # fmt: skip
    assert cli("gateway", "-v").stdout.split()[-2:] == ["CREATED", "ERROR"]


def test_watch_until_ctrl_c(cli: Cli) -> None:
    code = "from reconciler.cli.main import run; run()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "fleet", "-w"],
        env={**os.environ, **cli.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "NAME" in first and "NODES" in first and proc.returncode == 0, err
