#!/usr/bin/env python3
"""Run-to-run inconsistency of ``LocalGPExplainer`` against LIME on a smooth black box with known structure.

The issue's test function on 6 standard-normal features (300 training rows, seed 0),
f(x) = x·a + 0.1 sin(x₀x₁) with a = (1, −2, 0, 0.5, 0, 3) (features 2 and 4 have no effect), explained at the first
``--instances`` training rows with ``--repeats`` seeds each (seed 1000 r + i, as ``local_vs_lime.py``) at a budget
of 50 calls. Scores: the ARD relevance 1/ℓ (from the SAAS relevance surrogate, the default, or from the
acquisition surrogate's log-normal prior, ``relevance_prior="lognormal"``), the signed gradient times the
feature's std, and LIME's coefficients at the same number of samples (``discretize_continuous=False``, as
``local_vs_lime.py``; and once with ``LimeTabularExplainer``'s defaults, which discretise the features into quartile
bins). Inconsistency is ``gpytorch_explain.metrics.inconsistency`` (the BO-LIME paper's metric).
Needs ``lime``.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_smooth_consistency.py [--instances 3 --repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpytorch_explain import LocalGPExplainer  # noqa: E402
from gpytorch_explain.metrics import inconsistency  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
A = np.array([1.0, -2.0, 0.0, 0.5, 0.0, 3.0])
SETTINGS = {
    "lcb (defaults)": dict(acquisition="lcb"),
    "lcb, no stencil": dict(acquisition="lcb", stencil=None),
    "variance (defaults)": dict(acquisition="variance"),
    "lcb r=2 s=0.5": dict(acquisition="lcb", interval=2.0, lengthscale_prior_scale=0.5),
    "variance r=2 s=0.5": dict(acquisition="variance", interval=2.0, lengthscale_prior_scale=0.5),
    # 1/l from the acquisition surrogate's log-normal prior (the paper's score; the default before SAAS)
    "lcb (defaults) lognormal": dict(acquisition="lcb", relevance_prior="lognormal"),
    "variance r=2 s=0.5 lognormal": dict(
        acquisition="variance", interval=2.0, lengthscale_prior_scale=0.5, relevance_prior="lognormal"
    ),
}


def black_box(X: np.ndarray) -> np.ndarray:
    return X @ A + 0.1 * np.sin(X[:, 0] * X[:, 1])


def lime_scores(data: np.ndarray, x: np.ndarray, seed: int, samples: int, discretize: bool = False) -> np.ndarray:
    from lime.lime_tabular import LimeTabularExplainer

    ex = LimeTabularExplainer(data, mode="regression", discretize_continuous=discretize, random_state=seed)
    exp = ex.explain_instance(x, black_box, num_features=data.shape[1], num_samples=samples)
    s = np.zeros(data.shape[1])
    for j, c in exp.as_map()[next(iter(exp.as_map()))]:
        s[j] = c
    return s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=int, default=50)
    p.add_argument("--out", default=str(RESULTS / "local_smooth_consistency.txt"))
    args = p.parse_args()
    warnings.simplefilter("ignore")
    data = np.random.default_rng(0).normal(size=(300, 6))
    sd = data.std(0)
    cells = [(i, r) for i in range(args.instances) for r in range(args.repeats)]
    out = [
        "Inconsistency on a smooth black box, f = x.a + 0.1 sin(x0 x1), 6 features "
        f"(benchmarks/local_smooth_consistency.py {' '.join(sys.argv[1:])})",
        f"{args.instances} instances x {args.repeats} seeds, budget {args.budget}; lower is steadier.",
        "",
        f"{'method':28s} {'1/l':>8s} {'|grad|':>8s}  {'irrelevant 1/l share':>20s}  {'cpu s':>6s}",
    ]
    lime = np.zeros((args.repeats, args.instances, 6))
    t0 = time.process_time()
    for i, r in cells:
        lime[r, i] = lime_scores(data, data[i], 1000 * r + i, args.budget)
    lime_cpu = (time.process_time() - t0) / len(cells)
    out.append(f"{'LIME':28s} {inconsistency(lime):8.4f} {'':8s}  {'':20s}  {lime_cpu:6.2f}")
    limed = np.zeros_like(lime)  # LimeTabularExplainer's defaults: quartile-discretised features
    for i, r in cells:
        limed[r, i] = lime_scores(data, data[i], 1000 * r + i, args.budget, discretize=True)
    out.append(f"{'LIME (defaults, discretised)':28s} {inconsistency(limed):8.4f}")
    for name, kw in SETTINGS.items():
        rel = np.zeros((args.repeats, args.instances, 6))
        grad = np.zeros_like(rel)
        t0 = time.process_time()
        for i, r in cells:
            res = LocalGPExplainer(black_box, data, budget=args.budget, seed=1000 * r + i, **kw).explain(data[i])
            rel[r, i] = res.relevance
            grad[r, i] = res.gradient_mean * sd
        cpu = (time.process_time() - t0) / len(cells)
        share = rel[..., [2, 4]].sum(-1).mean()
        out.append(f"{name:28s} {inconsistency(rel):8.4f} {inconsistency(grad):8.4f}  {share:20.3f}  {cpu:6.2f}")
        print(out[-1], flush=True)
    Path(args.out).write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
