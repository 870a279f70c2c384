#!/usr/bin/env bash
# The invocations behind benchmarks/results/paper_tables.md (run from anywhere; about an hour on 2 shared cores).
set -e
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
COMMON="--fit-max 1000 --explain-max 30 --lime-samples 1000 --shap-samples 256 --lasso-max 600 --lasso-iter 15"
"${PYTHON:-python}" benchmarks/paper_tables.py --datasets diabetes boston fish --splits 5 $COMMON
"${PYTHON:-python}" benchmarks/paper_tables.py --datasets digits abalone wine --splits 3 $COMMON
