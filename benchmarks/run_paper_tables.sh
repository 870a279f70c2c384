#!/usr/bin/env bash
# The invocations behind benchmarks/results/paper_tables.md. They ran in parallel (each under `nice -n 19`,
# OMP_NUM_THREADS=1) on 2 CPU cores shared with other jobs and were stopped at a deadline: the committed tables
# hold the splits that had finished (each row says how many, and which GP fitting rows where they differ from
# the header). Reduced settings keep it inside that budget; the script's defaults are the fuller protocol:
#   * LIME/SHAP on 20 test samples per split, 1000 LIME samples, SHAP nsamples 256;
#   * 50 L-BFGS iterations for GPR/ARD (GPX: GPXModel.fit's default, 100);
#   * localized/network lasso on <= 600 training rows, 15 IRLS steps, fixed lambdas (no grid search);
#   * GP hyperparameters fitted on <= 1000 training rows (Digits, Diabetes, Boston, Fish: Diabetes, Boston and
#     Fish have fewer training rows, so all of them). Abalone: GPX fitted on all 3,342 training rows, GPR/ARD
#     on 1000; Wine: GPX on a random 3,000 of the 5,198 training rows, GPR/ARD on 1000 (a GPR fit on all
#     Abalone rows did not finish in 15 minutes at the ~25% of a core each run got). Every GP is then
#     conditioned on all training rows. Abalone's ARD fit lost positive definiteness with the 1e-4 noise floor
#     and was refitted with a 1e-2 floor (logged; fit_gpr does this by itself).
# Batch 1 (an earlier session) finished Diabetes and Boston (5 splits), Fish (4) and Digits split 0 before its
# deadline; batch 2 (this file's second block) adds Digits splits 1-4, Abalone and Wine, and reruns Fish (same
# settings; its splits also carry the stability with one global weight std, Table 3c, and replace batch 1's
# Fish splits of the same seed). --merge pools the splits of each dataset over the files (a later file wins for
# a repeated seed). Batch 2 was stopped at the deadline: Digits (5 splits) and Fish (5) finished, Wine after
# split 0 (one split takes ~17 min here), Abalone after 2 splits (a third finished but was not merged in time).
# Batch 3 (third block) reruns Diabetes, Boston and Digits without LIME/SHAP (--skip-agnostic) to add the
# global-std stability (Table 3c). Its splits reproduce batch 1/2's numbers (same seeds; checked: MSE to 1e-9,
# metrics to 6e-5, except the localized lasso's stability on Digits split 0, 0.171 vs 0.163, whose iterative
# solves are not bit-reproducible), and --merge merges a repeated seed method by method, so those datasets'
# LIME/SHAP cells stay batch 1/2's and have no Table 3c value. The first command was stopped after Digits split
# 0 (one Digits split with the lassos took 20 min under the load); Digits splits 1-4 were rerun also without the
# lassos (--skip-lasso; their Table 3c lasso cells cover split 0 only). Batch 3 also adds Abalone splits 2-4 and
# Wine splits 1-3 (batch 2's settings; the Wine run for splits 1-4 was stopped after split 1, which took 71 min
# with ~15-20 runnable processes on the 2 cores; splits 2 and 3 ran afterwards at a lower load, ~25 min each).
# benchmarks/gpx_faithfulness_profile.py writes results/gpx_faithfulness_<dataset>.md, which the merge quotes.
set -e
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD OMP_NUM_THREADS=1
PY="${PYTHON:-python}"
R=benchmarks/results
BASE="--gp-iter 50 --explain-max 20 --lime-samples 1000 --shap-samples 256 --lasso-max 600 --lasso-iter 15"
COMMON="--fit-max 1000 $BASE"
# batch 1 (the second command was stopped after Digits split 0; its Abalone part never finished)
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets diabetes boston fish --splits 5 $COMMON --out $R/paper_tables_small.md &
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets digits abalone --splits 3 $COMMON --out $R/paper_tables_mid.md &
wait
# batch 2
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets digits --first-split 1 --splits 4 $COMMON --out $R/paper_tables_digits.md &
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets abalone --splits 5 --fit-max 100000 --gpr-fit-max 1000 $BASE --out $R/paper_tables_abalone.md &
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets wine --splits 5 --fit-max 3000 --gpr-fit-max 1000 $BASE --out $R/paper_tables_wine.md &
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets fish --splits 5 $COMMON --out $R/paper_tables_fish.md &
wait
# batch 3 (the first command was stopped after Digits split 0, the third after Wine split 1)
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets diabetes boston digits --splits 5 --skip-agnostic $COMMON \
    --out $R/paper_tables_gstab.md &
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets abalone --first-split 2 --splits 3 --fit-max 100000 \
    --gpr-fit-max 1000 $BASE --out $R/paper_tables_abalone2.md &
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets wine --first-split 1 --splits 4 --fit-max 3000 \
    --gpr-fit-max 1000 $BASE --out $R/paper_tables_wine2.md &
nice -n 19 "$PY" benchmarks/gpx_faithfulness_profile.py --dataset fish --splits 5 --mults 1.5 2 --loo &  # --loo: 2026-11-28
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets digits --first-split 1 --splits 4 --skip-agnostic --skip-lasso \
    $COMMON --out $R/paper_tables_gstab2.md &
nice -n 19 "$PY" benchmarks/gpx_faithfulness_profile.py --dataset digits --splits 1 --skip-ref-opt --mults 1.5 &
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets wine --first-split 2 --splits 1 --fit-max 3000 \
    --gpr-fit-max 1000 $BASE --out $R/paper_tables_wine3.md &
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets wine --first-split 3 --splits 1 --fit-max 3000 \
    --gpr-fit-max 1000 $BASE --out $R/paper_tables_wine4.md &
wait
# batch 4 (a later session): Wine's fifth split, alone beside one other benchmark (~25 min)
nice -n 19 "$PY" benchmarks/paper_tables.py --datasets wine --first-split 4 --splits 1 --fit-max 3000 \
    --gpr-fit-max 1000 $BASE --out $R/paper_tables_wine5.md
# a check, not merged (2026-11-28, fourth session): does fitting GPX on all 1,438 Digits training rows (the tables fit
# on 1,000, then condition on all) close the faithfulness gap to the paper (0.888)? Split 0: faithfulness 0.882
# against 0.885 with 1,000 rows, MSE 0.058 both, stability 1.127 against 1.117: no.
# "$PY" benchmarks/paper_tables.py --datasets digits --splits 1 --fit-max 100000 --gpr-fit-max 1000 --gp-iter 50 \
#     --explain-max 20 --skip-agnostic --skip-lasso --out $R/paper_tables_digits_fitall.md
# batch 5 (2026-11-28, seventh session): the "GPX (paper fit)" column only, i.e. GPX fitted by the authors' own
# procedure (paper_tables.fit_gpx_paper), on the same splits and fitting rows as each dataset's GPX column; the
# small datasets in one process, then Wine, beside Abalone (OMP_NUM_THREADS=1 each, no other load but tests).
P="--gpx-fit paper --skip-baselines"
("$PY" benchmarks/paper_tables.py --datasets diabetes boston fish digits --splits 5 $COMMON $P \
    --out $R/paper_tables_paperfit.md
 "$PY" benchmarks/paper_tables.py --datasets wine --splits 5 --fit-max 3000 --gpr-fit-max 1000 $BASE $P \
    --out $R/paper_tables_paperfit_wine.md) &
"$PY" benchmarks/paper_tables.py --datasets abalone --splits 5 --fit-max 100000 --gpr-fit-max 1000 $BASE $P \
    --out $R/paper_tables_paperfit_abalone.md &
wait
# Digits split 0 again with every method, pytorch-gpx installed (`bench` extra): Table 4's times, pytorch-gpx's
# beside the others, all from this one run (its metrics reproduce the earlier split-0 records)
"$PY" benchmarks/paper_tables.py --datasets digits --splits 1 $COMMON --out $R/paper_tables_digits0.md
"$PY" benchmarks/gpx_faithfulness_profile.py --dataset fish --splits 5 --mults 1.5 2 --loo  # now with paper-fit
"$PY" benchmarks/paper_tables.py $COMMON --merge $R/paper_tables_small.json $R/paper_tables_mid.json \
    $R/paper_tables_digits.json $R/paper_tables_abalone.json $R/paper_tables_wine.json $R/paper_tables_fish.json \
    $R/paper_tables_gstab.json $R/paper_tables_gstab2.json $R/paper_tables_abalone2.json $R/paper_tables_wine2.json \
    $R/paper_tables_wine3.json $R/paper_tables_wine4.json $R/paper_tables_wine5.json $R/paper_tables_paperfit.json \
    $R/paper_tables_paperfit_abalone.json $R/paper_tables_paperfit_wine.json $R/paper_tables_digits0.json \
    --out $R/paper_tables.md
