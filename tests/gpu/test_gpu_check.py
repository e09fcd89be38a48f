"""The GPU check (scripts/gpu_check.py) in CI: the same script that proves the GPU paths on
a real NVIDIA host runs here against a fake nvidia-smi (``fake_nvidia_smi.sh``: one H200),
a real server, the real local agent and real process jobs, so every GPU code path — naming,
offers, ``gpus/list``, placement by name/memory/count, device isolation, GPU metrics, a
GPU service through the proxy — stays covered without a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_nvidia_smi.sh")


@pytest.fixture
def fake_gpu_path() -> Iterator[Path]:
    # World-readable: process jobs run as a uid of their own and call it too; not under /tmp,
    # which a sandboxed job sees as its own empty tmpfs (a real nvidia-smi is in /usr/bin)
    folder = Path(tempfile.mkdtemp(prefix="dockyard-fake-gpu.", dir="/var/tmp"))
    folder.chmod(0o755)
    shutil.copy(FAKE, folder / "nvidia-smi")
    (folder / "nvidia-smi").chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_gpu_check_passes_on_a_fake_h200(fake_gpu_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu-check.json"
    env = {**os.environ, "PATH": f"{fake_gpu_path}:{os.environ['PATH']}"}
    command = [sys.executable, "scripts/gpu_check.py", "--no-torch", "--fake-load"]
    result = subprocess.run(
        [*command, "--out", str(out)], cwd=ROOT, env=env, capture_output=True, timeout=400
    )
    report = json.loads(out.read_text())
    failed = [c for c in report["checks"] if not c["ok"]]
    assert not failed, json.dumps(failed, indent=2) + result.stderr.decode()[-2000:]
    assert result.returncode == 0
    assert report["facts"]["gpu"] == {"name": "H200", "memory_gb": 141, "count": 1}
    names = [check["name"] for check in report["checks"]]
    assert names == [
        "gpu detected as dstack names it",
        "offers and gpus/list show it",
        "gpu: H200:1 sees one GPU",
        "gpu: 70GB.. sees one GPU",
        "gpu: 2 fails with no capacity",
        "gpu: A100 is not placed",
        "two one-GPU tasks never run together",
        "metrics show GPU utilization and memory",
        "a GPU service serves through the proxy",
    ]
