#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment in .venv with the pinned, CPU-only stack, and puts it first
# on PATH. Usage: source scripts/env.sh EXTRAS   (EXTRAS like "test", "demo" or "docs")
# The setup runs in a subshell with `set -euo pipefail`, so sourcing leaves the caller's shell options as they were.
_gx_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_gx_venv="${GPX_VENV:-$_gx_root/.venv}"
# (not inside `if !`: bash ignores set -e in a tested context, so a failed step would not stop the subshell)
(
  set -euo pipefail
  root="$_gx_root"
  venv="$_gx_venv"
  extras="${1:-test}"
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
)
_gx_status=$?
if [[ $_gx_status -ne 0 ]]; then
  echo "[env] setting up $_gx_venv failed" >&2
  unset _gx_root _gx_venv _gx_status
  return 1 2>/dev/null || exit 1
fi
export PATH="$_gx_venv/bin:$PATH"
export MPLBACKEND="${MPLBACKEND:-Agg}"
unset _gx_root _gx_venv _gx_status
