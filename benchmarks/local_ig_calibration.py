#!/usr/bin/env python3
"""Two-std coverage of the true integrated gradients by ``LocalGPExplainer`` on random smooth black boxes.

Each case draws a black box on D = 4, 6, 8 or 10 features (cycling with the case number; data seed 100 + case):
training data N(μ, diag(s²)) with log s ~ U(-1, 1), and, in the standardised coordinates z = (x - μ)/s,

    f(x) = x·a + c₁ z_i z_j + c₂ z_k z_l + sin(w z_m) + 0.5 z_n²

with a_j ~ N(0, 1)/s_j (about 30 % of them set to 0), c ~ N(0, 1), w ~ U(1.5, 4) and random features i, j, k, l,
m, n. It is explained at training row ``5 + seed`` with ``budget`` calls and the library's defaults otherwise.
The true IG from the result's own baseline is computed by the midpoint rule on 400 points with central
differences. Printed per acquisition: the share of features whose true IG lies within two stds of
``integrated_gradients`` (a calibrated Gaussian: 95 %), the median and largest |z|, the share of explanations whose
``predict`` at the baseline is within two stds of f, the gradient's coverage at x, and the CPU seconds per
explanation.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_ig_calibration.py [--cases 36 --seeds 2 --acquisitions lcb]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "results"


def make_case(case: int):
    """``(training data, black box)`` of case ``case`` (see the module docstring)."""
    rng = np.random.RandomState(100 + case)
    D = (4, 6, 8, 10)[case % 4]
    s = np.exp(rng.uniform(-1, 1, D))
    mu = rng.randn(D)
    X = rng.randn(300, D) * s + mu
    a = rng.randn(D) / s
    a[rng.rand(D) < 0.3] = 0.0
    pairs = [tuple(rng.choice(D, 2, replace=False)) for _ in range(2)]
    c = rng.randn(2)
    m, w, n = rng.randint(D), rng.uniform(1.5, 4.0), rng.randint(D)

    def f(Xq: np.ndarray) -> np.ndarray:
        Xq = np.atleast_2d(Xq)
        Z = (Xq - mu) / s
        out = Xq @ a + np.sin(w * Z[:, m]) + 0.5 * Z[:, n] ** 2
        for ck, (i, j) in zip(c, pairs, strict=True):
            out = out + ck * Z[:, i] * Z[:, j]
        return out

    return X, f


def true_ig(f, x: np.ndarray, b: np.ndarray, n: int = 400) -> np.ndarray:
    """(x - b) ⊙ ∫₀¹ ∇f(b + t(x - b)) dt by the midpoint rule and central differences."""
    D = x.size
    t = (np.arange(n) + 0.5) / n
    P = b + t[:, None] * (x - b)
    h = 1e-5 * (np.abs(x - b) + 1e-3)
    E = np.eye(D)
    g = np.stack([(f(P + h[j] * E[j]) - f(P - h[j] * E[j])) / (2 * h[j]) for j in range(D)], axis=1)
    return (x - b) * g.mean(0)


def one(task) -> dict:
    case, seed, acquisition, budget = task
    import torch

    from gpytorch_explain import LocalGPExplainer

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    X, f = make_case(case)
    x = X[5 + seed]
    t0 = time.process_time()
    res = LocalGPExplainer(f, X, budget=budget, seed=seed, acquisition=acquisition).explain(x)
    cpu = time.process_time() - t0
    z_ig = (res.integrated_gradients - true_ig(f, x, res.baseline)) / res.integrated_gradients_std
    m, s = res.predict(res.baseline[None, :])
    z_b = (m[0] - f(res.baseline[None, :])[0]) / s[0]
    E = np.eye(x.size)
    grad = np.array([(f(x + 1e-6 * E[j]) - f(x - 1e-6 * E[j]))[0] / 2e-6 for j in range(x.size)])
    z_g = (res.gradient_mean - grad) / res.gradient_std
    return {"z_ig": np.abs(z_ig), "z_b": abs(z_b), "z_g": np.abs(z_g), "cpu": cpu}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=36)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--budget", type=int, default=50)
    p.add_argument("--acquisitions", nargs="+", default=["lcb", "variance", "gradient"])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=str(RESULTS / "local_ig_calibration.txt"))
    args = p.parse_args(argv)
    tasks = [(c, s, a, args.budget) for a in args.acquisitions for c in range(args.cases) for s in range(args.seeds)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, tasks))
    out = [
        f"LocalGPExplainer: two-std coverage of the true IG on random smooth black boxes "
        f"(benchmarks/local_ig_calibration.py; {args.cases} cases x {args.seeds} seeds, {args.budget} calls, "
        "the defaults otherwise).",
        "",
        f"{'acquisition':20s} {'IG inside 2 std':>16s} {'median |z|':>11s} {'max |z|':>8s} "
        f"{'predict(b) 2 std':>17s} {'gradient 2 std':>15s} {'cpu s':>6s}",
    ]
    for a in args.acquisitions:
        rs = [r for t, r in zip(tasks, results, strict=True) if t[2] == a]
        z = np.concatenate([r["z_ig"] for r in rs])
        zg = np.concatenate([r["z_g"] for r in rs])
        zb = np.array([r["z_b"] for r in rs])
        line = (
            f"{a:20s} {f'{int((z <= 2).sum())} / {z.size}':>16s} {np.median(z):11.2f} {z.max():8.1f} "
            f"{f'{int((zb <= 2).sum())} / {zb.size}':>17s} {f'{int((zg <= 2).sum())} / {zg.size}':>15s} "
            f"{np.mean([r['cpu'] for r in rs]):6.1f}"
        )
        out.append(line)
        print(line, flush=True)
    Path(args.out).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
