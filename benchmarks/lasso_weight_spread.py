#!/usr/bin/env python3
"""Do the localized / network lasso baselines of ``paper_tables.py`` give local explanations at all?

Fits them exactly as the paper tables do (``run_paper_tables.sh``: ≤ 600 training rows, 15 IRLS steps, fixed
λ1 = 1, λ2 = 0.1 / 0, k = 10; the same splits and row subsets) and prints, per dataset and split:

* the relative spread of the per-sample weights, mean over features of their std across the training rows divided
  by their mean |w|: near 0, every sample has the same weights, i.e. one global linear model;
* the largest change of a test sample's weights when one of its features is set to 0 (the faithfulness metric's
  removal): near 0, f(x) - f(x with x_j = 0) = w_j x_j exactly, so faithfulness is 1 by construction and stability
  near 0, whatever the method's merit.

Usage: ``python benchmarks/lasso_weight_spread.py [--datasets ...] [--splits 5]`` (seconds per small dataset).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import paper_tables as P  # noqa: E402
from benchmarks.baselines.localized_lasso import LocalizedLasso  # noqa: E402


def spread(weights: np.ndarray) -> float:
    """Mean over features of the std across rows of the weights, over their mean magnitude."""
    return float(weights.std(0).mean() / max(np.abs(weights).mean(), np.finfo(float).tiny))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=P.DATASETS, choices=P.DATASETS)
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--lasso-max", type=int, default=600)
    p.add_argument("--lasso-iter", type=int, default=15)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    print("dataset   split  method     weight spread  max test-weight change on removal  fit s")
    for ds in args.datasets:
        x, y = P.load(ds)
        x, y = P.standardise(x), P.standardise(y[:, None])[:, 0]
        for seed in range(args.splits):
            rng = np.random.default_rng(seed)  # the same two draws as paper_tables.run_split
            perm = rng.permutation(len(x))
            n_tr = int(round(0.8 * len(x)))
            xtr, ytr, xte = x[perm[:n_tr]], y[perm[:n_tr]], x[perm[n_tr:]]
            lsub = rng.permutation(n_tr)[: args.lasso_max]
            for key, lam2 in (("Localized", 0.1), ("Network", 0.0)):
                t0 = time.perf_counter()
                ll = LocalizedLasso(
                    lam1=1.0, lam2=lam2, k=10, max_iter=args.lasso_iter, cg_maxiter=300, cg_tol=1e-6
                ).fit(xtr[lsub], ytr[lsub])
                seconds = time.perf_counter() - t0
                wt = ll.test_weights(xte)
                change = 0.0
                for j in range(x.shape[1]):
                    xz = xte.copy()
                    xz[:, j] = 0.0
                    change = max(change, float(np.abs(ll.test_weights(xz) - wt).max()))
                print(
                    f"{ds:9s} {seed:5d}  {key:9s}  {spread(ll.coef_):13.2e}  {change:33.2e}  {seconds:5.1f}", flush=True
                )


if __name__ == "__main__":
    main()
