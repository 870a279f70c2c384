#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment in .venv with the pinned, CPU-only stack.
# Usage: source scripts/env.sh EXTRAS   (EXTRAS like "test" or "demo")
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
extras="${1:-test}"
venv="${GPX_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "[env] creating virtual environment in $venv"
  "$python" -m venv "$venv"
fi
stamp="$venv/.gpytorch-explain-$extras"
want="$(cat "$root/constraints.txt" "$root/setup.cfg" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "[env] installing torch (CPU) and gpytorch-explain[$extras] with constraints.txt"
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  # torch first and pinned: an unpinned resolve would pull the multi-GB CUDA build.
  "$venv/bin/python" -m pip install -q -c "$root/constraints.txt" "torch==2.13.0"
  "$venv/bin/python" -m pip install -q -c "$root/constraints.txt" -e "$root[$extras]"
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
export MPLBACKEND="${MPLBACKEND:-Agg}"
