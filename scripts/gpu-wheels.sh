#!/usr/bin/env bash
# Builds .gpu-wheels/: every runtime dependency of Dockyard as wheels for the GPU machine
# (Python ${GPU_PYTHON:-3.12}, x86_64 Linux), which cannot download anything. Carry the folder
# there with the working tree, then run scripts/gpu-check.sh (docs/agent.md).
set -euo pipefail
cd "$(dirname "$0")/.."
version="${GPU_PYTHON:-3.12}"
python3 - <<'PY' >.gpu-wheels.txt
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
rm -rf .gpu-wheels
python3 -m pip download -q -d .gpu-wheels --only-binary=:all: --implementation cp \
  --python-version "$version" --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -r .gpu-wheels.txt
rm -f .gpu-wheels.txt
du -sh .gpu-wheels
