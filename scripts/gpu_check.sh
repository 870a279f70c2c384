#!/usr/bin/env bash
# GPU checks, for a machine with CUDA whose Python already has torch, gpytorch, linear_operator, botorch, scipy and
# scikit-learn (the package itself is imported from this checkout). Each step has its own time limit, so a slow one
# cannot hide the others; output goes to stdout and, when OUT is set, to $OUT/gpu_check.log.
#   1. tests/test_cuda.py (every public path on CUDA against the CPU in float64) and the multi-device test;
#   2. benchmarks/scale.py --method exact --lean on CUDA in float32 at 5e4 and 1e5 rows (issue 18's measurement),
#      hyperparameters warm-started on 10,000 rows, then a few L-BFGS steps on all rows;
#   3. the whole CPU test suite on a machine where CUDA is available (tests must not change behaviour there).
# Usage: [GPU_CHECK_SECONDS=540] [SCALE_EXTRA="--warm-cholesky"] bash scripts/gpu_check.sh [steps...]
#   steps: tests scale100k scale50k suite (default: all, in this order); GPU_CHECK_SECONDS bounds the whole run: a
#   step gets at most what is left of it, and a step with under 30 s left is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
log="${OUT:-/tmp}/gpu_check.log"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests scale100k scale50k suite)
deadline=${GPU_CHECK_SECONDS:-540}
run() {  # run LIMIT_SECONDS NAME COMMAND...
  local limit=$1 name=$2
  shift 2
  local left=$((deadline - SECONDS))
  ((left < limit)) && limit=$left
  if ((limit < 30)); then
    echo "=== $name: skipped ($left s left of GPU_CHECK_SECONDS=$deadline)" | tee -a "$log"
    return
  fi
  echo "=== $name (limit ${limit}s): $*" | tee -a "$log"
  local t0=$SECONDS
  timeout --signal=TERM --kill-after=20 "$limit" "$@" 2>&1 | tee -a "$log"
  echo "=== $name: rc ${PIPESTATUS[0]} in $((SECONDS - t0)) s" | tee -a "$log"
}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, gpytorch, linear_operator, botorch; print('torch', torch.__version__, 'gpytorch', gpytorch.__version__, 'linear_operator', linear_operator.__version__, 'botorch', botorch.__version__)"
} 2>&1 | tee -a "$log"
scale=(python3 benchmarks/scale.py --dataset synthetic --method exact --lean --weights-path solve --device cuda
  --dtype float32 --n-test 10000 --warm-start 10000 --max-iter 40 --full-iter 3 --block-elements 67108864
  --max-gib 0 --gpr-mean-only ${SCALE_EXTRA:-})
for step in "${steps[@]}"; do
  case "$step" in
    tests) run 100 tests python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/models/test_gpx_multi_device.py -rs ;;
    scale100k) run 320 scale100k "${scale[@]}" --n 100000 --max-minutes 1.2 ;;
    scale50k) run 200 scale50k "${scale[@]}" --n 50000 --max-minutes 0.7 ;;
    suite) run 150 suite python3 -m pytest -q -p no:cacheprovider -x -n 16 tests --ignore=tests/test_tutorials.py --ignore=tests/test_docs_snippets.py ;;
    *) echo "unknown step $step" ;;
  esac
done
