#!/usr/bin/env bash
# Sets up everything from nothing (virtual environment, pinned CPU torch, the package) and runs
# the lint, the test suite and the documentation build (warnings are errors). Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/env.sh test
echo "[test] ruff"
ruff check gpytorch_explain tests benchmarks tutorials scripts docs conftest.py
ruff format --check gpytorch_explain tests benchmarks tutorials scripts docs conftest.py
echo "[test] pytest"
# one worker per core (pytest-xdist; GPX_TEST_WORKERS=0 runs in this process): most tests are single-threaded.
# worksteal: an idle worker takes queued tests from a busy one (with the default "load" one worker was once left
# with ~9 minutes of the slowest tests queued while the other sat idle, doubling the suite's wall time)
python -m pytest -n "${GPX_TEST_WORKERS:-auto}" --dist worksteal "$@"
echo "[test] docs (sphinx -W; tutorials executed on small data)"
GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1 python -m sphinx -E -W --keep-going -q -b html docs docs/_build/html
