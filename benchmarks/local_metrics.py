#!/usr/bin/env python3
"""The black-box explainer scored like the GPX paper's methods: faithfulness, sufficiency and stability on a GPR.

``LocalGPExplainer`` (through ``gpytorch_explain.explainers.LocalGPExplainerAdapter``) and LIME explain the same
black box, the posterior mean of a GP regression (scaled RBF, fitted as in ``paper_tables.py``), on the first
``--rows`` test rows of one 80/20 split of scikit-learn's diabetes data (x and y standardised), and are scored with
``gpytorch_explain.metrics`` exactly as ``paper_tables.py`` scores GPR+LIME (baseline 0 = the training mean;
stability with the explained rows as the neighbourhood, ε = 0.05 and 0.2). The GP explainer's contributions are
its local integrated gradients from the training mean, or gradient × (x − mean) (``--score``); LIME's are
coefficient × standardised value. Budgets: LIME at the GP's budget and at 5,000 samples. Needs ``lime``.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_metrics.py [--rows 20 --budget 50 --seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_diabetes

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.paper_tables import fit_gpr, posterior_mean, standardise  # noqa: E402
from gpytorch_explain.explainers import LimeExplainer, LocalGPExplainerAdapter  # noqa: E402
from gpytorch_explain.metrics import faithfulness, stability, sufficiency  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def score(out, x, predict) -> dict:
    zero = np.zeros(x.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        faith = faithfulness(predict, x, out.contributions, baseline=zero)
        suff = sufficiency(predict, x, out.contributions, baseline=zero, k=[1, 3, 5])
        w = out.weights if out.weights is not None else out.contributions
        stab = stability(x, w, reduction="none")
        stab2 = stability(x, w, eps=0.2, reduction="none")
    return {
        "faith": float(np.nanmean(faith)),
        "suff": suff.mean(1),
        "stab": float(np.nanmean(stab)) if np.isfinite(stab).any() else float("nan"),
        "stab2": float(np.nanmean(stab2)) if np.isfinite(stab2).any() else float("nan"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--budget", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="split and explainer seed")
    p.add_argument("--out", default=str(RESULTS / "local_metrics.txt"))
    args = p.parse_args()
    x, y = load_diabetes(return_X_y=True)
    x, y = standardise(x), standardise(y[:, None])[:, 0]
    perm = np.random.default_rng(args.seed).permutation(len(x))
    n_tr = int(round(0.8 * len(x)))
    xtr, ytr, xte = x[perm[:n_tr]], y[perm[:n_tr]], x[perm[n_tr:]][: args.rows]
    torch.manual_seed(args.seed)
    gpr = fit_gpr(torch.as_tensor(xtr), torch.as_tensor(ytr), False, 100)
    mean = posterior_mean(gpr)

    def predict(a):
        return mean(torch.as_tensor(np.asarray(a, dtype=np.float64))).numpy()

    b = xtr.mean(0)  # the training mean (≈ 0), the metrics' baseline and the local explainer's
    methods = {
        f"LocalGP IG, variance r=2 s=0.5 @{args.budget}": LocalGPExplainerAdapter(
            predict,
            xtr,
            baseline=b,
            budget=args.budget,
            seed=args.seed,
            acquisition="variance",
            interval=2.0,
            lengthscale_prior_scale=0.5,
        ),
        f"LocalGP IG, defaults (lcb) @{args.budget}": LocalGPExplainerAdapter(
            predict, xtr, baseline=b, budget=args.budget, seed=args.seed
        ),
        f"LocalGP grad x input, variance @{args.budget}": LocalGPExplainerAdapter(
            predict,
            xtr,
            score="gradient_input",
            baseline=b,
            budget=args.budget,
            seed=args.seed,
            acquisition="variance",
            interval=2.0,
            lengthscale_prior_scale=0.5,
        ),
        f"LIME @{args.budget}": LimeExplainer(predict, xtr, num_samples=args.budget, seed=args.seed),
        "LIME @5000": LimeExplainer(predict, xtr, num_samples=5000, seed=args.seed),
    }
    lines = [
        "Black-box explainers on a GPR's posterior mean, scored as paper_tables.py scores GPR+LIME "
        f"(benchmarks/local_metrics.py {' '.join(sys.argv[1:])})",
        f"diabetes (n = {len(x)}, d = {x.shape[1]}), split seed {args.seed}, first {len(xte)} test rows; "
        "faithfulness higher is better, sufficiency (|change| keeping the top-k features) and stability lower.",
        "",
        f"{'method':44s} {'faith':>7s} {'suff@1':>7s} {'suff@3':>7s} {'suff@5':>7s} {'stab':>7s} {'stab0.2':>8s}"
        f" {'s/row':>7s}",
    ]
    for name, ex in methods.items():
        t0 = time.process_time()
        out = ex.explain(xte)
        cpu = (time.process_time() - t0) / len(xte)
        s = score(out, xte, predict)
        lines.append(
            f"{name:44s} {s['faith']:7.3f} {s['suff'][0]:7.3f} {s['suff'][1]:7.3f} {s['suff'][2]:7.3f} "
            f"{s['stab']:7.3f} {s['stab2']:8.3f} {cpu:7.2f}"
        )
        print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
