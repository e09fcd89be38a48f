#!/usr/bin/env bash
# The GPU check (docs/agent.md, "Proven on a GPU"): on a host with an NVIDIA GPU, runs
# scripts/gpu_check.py (a real `dockyard server` on the local fleet, tasks and a service
# asking for the GPU) and writes its JSON results to ${OUT:-.}/gpu-check.json.
# The host needs Python >= 3.11 and git; nothing is downloaded there: the dependencies come
# from the wheelhouse that scripts/gpu-wheels.sh builds (.gpu-wheels/), installed into a
# venv that also sees the system's site-packages (PyTorch, when installed).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD}/gpu-check.json"
venv="${GPU_CHECK_VENV:-${TMPDIR:-/tmp}/dockyard-gpu-venv}"
python="${PYTHON:-python3}"
for tool in git "$python" nvidia-smi; do
  command -v "$tool" >/dev/null || echo "gpu-check: warning: $tool not found" >&2
done
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
if [ -d .gpu-wheels ]; then
  "$venv/bin/python" -m pip install -q --no-index --find-links .gpu-wheels .gpu-wheels/*.whl
else
  "$venv/bin/python" -m pip install -q -e .
fi
nvidia-smi -L || true
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$venv/bin/python" scripts/gpu_check.py --out "$out" "$@"
