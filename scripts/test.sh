#!/usr/bin/env bash
# Sets up everything from nothing (virtual environment, pinned CPU torch, the package) and runs
# the lint and the test suite. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/env.sh test
echo "[test] ruff"
ruff check gpytorch_explain tests benchmarks tutorials scripts conftest.py
echo "[test] pytest"
python -m pytest "$@"
