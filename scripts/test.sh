#!/usr/bin/env bash
# The test command: sets up what the tests need, then runs every test (ruff, mypy --strict
# and import-linter run inside the suite, see tests/test_quality.py). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
exec .venv/bin/python -m pytest -q -p no:cacheprovider -ra "$@"
