#!/usr/bin/env bash
# The test command: sets up what the tests need, then runs every test (ruff, mypy --strict
# and import-linter run inside the suite, see tests/test_quality.py). Extra args go to pytest.
# The tests mostly wait on servers, agents and subprocesses, so they run in 3 worker
# processes (pytest-xdist), each test file on one worker (--dist loadfile: a module's shared
# server, agent or dstack client is started once); DOCKYARD_TEST_WORKERS changes the count,
# `-n 0` as an extra arg runs them in this process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
exec .venv/bin/python -m pytest -q -p no:cacheprovider -ra \
  -n "${DOCKYARD_TEST_WORKERS:-3}" --dist loadfile "$@"
