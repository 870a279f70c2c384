#!/usr/bin/env bash
# The invocations behind benchmarks/results/paper_tables.md (about an hour on 2 CPU cores shared with other jobs).
# Reduced settings (fewer splits for the large datasets, LIME/SHAP on 20 test samples per split, 50 L-BFGS
# iterations for GPR/ARD) keep it inside that budget; the script's defaults are the fuller protocol.
set -e
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
COMMON="--fit-max 1000 --gp-iter 50 --explain-max 20 --lime-samples 1000 --shap-samples 256 --lasso-max 600 --lasso-iter 15"
"${PYTHON:-python}" benchmarks/paper_tables.py --datasets diabetes boston fish --splits 5 $COMMON
"${PYTHON:-python}" benchmarks/paper_tables.py --datasets digits abalone --splits 3 $COMMON
"${PYTHON:-python}" benchmarks/paper_tables.py --datasets wine --splits 2 $COMMON
