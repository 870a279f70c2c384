#!/usr/bin/env python3
"""Two-std coverage of the true gradient by ``LocalGPExplainer`` with many features for the budget.

With 13-33 continuous features at 50 calls the central-difference stencil (2 rows per feature) does not fit and
``stencil="auto"`` takes the forward stencil (1 row per feature, ``gpytorch_explain/local/stencil.py``). This
benchmark compares it with no stencil (``stencil=None``, the surrogate alone) on

* ``smooth30``: f = x·a + 0.5 sin(x₀x₁) + 0.3 tanh(x₂ + x₃) on 30 standard-normal features (a ~ N(0, 1), 10 of its
  entries set to 0; data seed 1), 50 calls; ``smooth20``: the same on 20 features at 40 calls;
* ``cancer_prob`` / ``cancer_logit``: scikit-learn's breast-cancer data (30 features) and the SVC of
  ``benchmarks/local_vs_lime.py`` (``StandardScaler`` + ``SVC(probability=True)``), explaining the class-1
  probability or its logit at the first test instances, 50 calls; true gradients by central differences with steps
  of 0.001 of each feature's std.

Each explanation uses the defaults (``"lcb"``, interval 1) with seed 0, 1, ... per instance. Printed per case and
setting: features whose true gradient lies within two stds of ``gradient_mean`` / total, the median and largest
|z| (z = (mean - truth) / std), and the CPU seconds per explanation.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_gradient_calibration_highdim.py [--instances 3 --seeds 2]
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
from gpytorch_explain.local import from_sklearn_classifier  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def smooth_case(D: int):
    rng = np.random.default_rng(1)
    a = rng.normal(size=D)
    a[rng.permutation(D)[: D // 3]] = 0.0

    def f(X):
        return X @ a + 0.5 * np.sin(X[:, 0] * X[:, 1]) + 0.3 * np.tanh(X[:, 2] + X[:, 3])

    def grad(x):
        g = a.copy()
        g[0] += 0.5 * np.cos(x[0] * x[1]) * x[1]
        g[1] += 0.5 * np.cos(x[0] * x[1]) * x[0]
        g[2:4] += 0.3 / np.cosh(x[2] + x[3]) ** 2
        return g

    data = rng.normal(size=(300, D))
    return f, grad, data, data


def cancer_case(output: str):
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    ds = load_breast_cancer()
    Xtr, Xte, ytr, _ = train_test_split(ds.data, ds.target, test_size=0.2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = make_pipeline(StandardScaler(), SVC(probability=True, random_state=0)).fit(Xtr, ytr)
    f = from_sklearn_classifier(model, 1, output=output)
    h = 1e-3 * Xtr.std(0)

    def grad(x):
        E = np.diag(h)
        return (f(x + E) - f(x - E)) / (2 * h)

    return f, grad, Xtr, Xte


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--out", default=str(RESULTS / "local_gradient_calibration_highdim.txt"))
    args = p.parse_args()
    warnings.simplefilter("ignore")
    cases = {
        "smooth30": (smooth_case(30), 50),
        "smooth20": (smooth_case(20), 40),
        "cancer_prob": (cancer_case("probability"), 50),
        "cancer_logit": (cancer_case("logit"), 50),
    }
    out = [
        "Gradient coverage with many features for the budget (benchmarks/local_gradient_calibration_highdim.py "
        f"{' '.join(sys.argv[1:])})",
        f"{args.instances} instances x {args.seeds} seeds per case; defaults ('lcb', interval 1).",
        "",
        f"{'case':14s} {'budget':>6s} {'stencil':22s} {'inside 2 std':>13s} {'median |z|':>11s} {'max |z|':>8s}"
        f" {'cpu s':>6s}",
    ]
    for name, ((f, grad, Xtr, Xte), budget) in cases.items():
        for label, kw in (("auto", {}), ("None", {"stencil": None})):
            zs, cpu = [], 0.0
            for i in range(args.instances):
                x = Xte[i]
                truth = grad(x)
                for seed in range(args.seeds):
                    ex = LocalGPExplainer(f, Xtr, budget=budget, seed=seed, **kw)
                    t0 = time.process_time()
                    res = ex.explain(x)
                    cpu += time.process_time() - t0
                    zs.append(np.abs(res.gradient_mean - truth) / res.gradient_std)
            design = f"{label} ({ex.stencil_kind if ex.stencil is not None else 'off'})"
            z = np.concatenate(zs)
            line = (
                f"{name:14s} {budget:6d} {design:22s} {f'{int((z <= 2).sum())} / {z.size}':>13s} "
                f"{np.median(z):11.2f} {z.max():8.1f} {cpu / len(zs):6.1f}"
            )
            out.append(line)
            print(line, flush=True)
    Path(args.out).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
