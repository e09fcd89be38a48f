#!/usr/bin/env bash
# Refreshes the lock: requirements/*.txt pinned, with hashes, to the newest versions that
# pyproject.toml's ranges allow (uv pip compile, resolved for every platform, Python 3.11),
# then, unless --no-test, runs the whole suite on them (scripts/test.sh makes .venv anew
# from the new lock). Commit the lock only with a green suite.
#   scripts/lock.sh              refresh and test
#   scripts/lock.sh --no-test    refresh only
# The runtime lock is compiled with the dev lock as its constraint, so the two agree on
# every package they share (setup.sh lets a dev venv serve the quick start).
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$(mktemp -d "${TMPDIR:-/tmp}/dockyard-lock.XXXXXX")
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv"
"$tools/venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes \
  -r requirements/lock-tools.txt >"$tools/pip.log" 2>&1 || { cat "$tools/pip.log" >&2; exit 1; }
uv() { "$tools/venv/bin/uv" pip compile -q --generate-hashes --universal --python-version 3.11 \
  --no-header --upgrade "$@"; }
uv requirements/build.in -o requirements/build.txt
uv pyproject.toml --extra dev --extra pulumi -o requirements/dev.txt
uv pyproject.toml -c requirements/dev.txt -o requirements/runtime.txt
uv requirements/lock-tools.in -o requirements/lock-tools.txt
git --no-pager diff --stat -- requirements/
[ "${1:-}" = "--no-test" ] && exit 0
exec bash scripts/test.sh
