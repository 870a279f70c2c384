#!/usr/bin/env python3
"""Are ``LocalGPExplainer``'s gradient stds honest? Two-std coverage of the true gradient on smooth black boxes.

Four smooth black boxes with known gradients on 6 features of different scales (stds 1, 10, 0.1, 1, 5, 1; 300
Gaussian training rows, seed 0), each explained at the first 4 training rows (``seed`` = the row index) with a
budget of 50 calls:

* ``linsin``: a linear score x·a/σ plus a weak interaction 0.1 sin(x₀x₃) that oscillates across the box;
* ``quad``: x₀² + (x₁/10)(x₂/0.1);
* ``logistic``: the logistic function of the linear score;
* ``sincos``: sin x₀ + cos x₃ + 0.3 x₅.

For each acquisition and each ``attribution_noise`` setting (learned, and fixed at 1e-6) it prints, per black box,
the number of features whose true gradient lies within two posterior stds of ``gradient_mean``, the total over the
96 features and the median |z| (z = (mean − truth) / std; for calibrated Gaussian intervals about 95 % coverage
and median |z| ≈ 0.67). The CPU time is the whole sweep's.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_gradient_calibration.py [--acquisitions variance gradient lcb]
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

RESULTS = Path(__file__).resolve().parent / "results"
SCALES = np.array([1.0, 10.0, 0.1, 1.0, 5.0, 1.0])
A = np.array([1.0, -0.5, 2.0, 0.0, 0.0, 0.7])


def _sigmoid(t):
    return 1.0 / (1.0 + np.exp(-t))


def black_boxes() -> dict:
    """name -> (f: (m, 6) -> (m,), gradient: (6,) -> (6,))."""

    def linsin_grad(x):
        g = A / SCALES
        c = 0.1 * np.cos(x[0] * x[3])
        return g + c * np.array([x[3], 0, 0, x[0], 0, 0])

    def logistic_grad(x):
        p = _sigmoid((x / SCALES) @ A)
        return p * (1 - p) * A / SCALES

    return {
        "linsin": (lambda X: (X / SCALES) @ A + 0.1 * np.sin(X[:, 0] * X[:, 3]), linsin_grad),
        "quad": (
            lambda X: X[:, 0] ** 2 + (X[:, 1] / 10) * (X[:, 2] / 0.1),
            lambda x: np.array([2 * x[0], x[2] / 0.1 / 10, x[1] / 10 / 0.1, 0, 0, 0]),
        ),
        "logistic": (lambda X: _sigmoid((X / SCALES) @ A), logistic_grad),
        "sincos": (
            lambda X: np.sin(X[:, 0]) + np.cos(X[:, 3]) + 0.3 * X[:, 5],
            lambda x: np.array([np.cos(x[0]), 0, 0, -np.sin(x[3]), 0, 0.3]),
        ),
    }


def sweep(
    acquisition: str, noise: float | None, instances: int, budget: int, interval: float = 1.0, prior_scale: float = 1.0
) -> tuple[list[str], int, int, float]:
    data = np.random.default_rng(0).normal(size=(300, 6)) * SCALES
    lines, covered, total, zs = [], 0, 0, []
    for name, (f, grad) in black_boxes().items():
        hits = 0
        for i in range(instances):
            ex = LocalGPExplainer(
                f,
                data,
                acquisition=acquisition,
                budget=budget,
                seed=i,
                attribution_noise=noise,
                interval=interval,
                lengthscale_prior_scale=prior_scale,
            )
            res = ex.explain(data[i])
            z = (res.gradient_mean - grad(data[i])) / np.maximum(res.gradient_std, 1e-300)
            hits += int((np.abs(z) <= 2).sum())
            zs.extend(z.tolist())
        lines.append(f"    {name:9s} {hits:3d} / {6 * instances}")
        covered += hits
        total += 6 * instances
    return lines, covered, total, float(np.median(np.abs(zs)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--acquisitions", nargs="+", default=["variance", "gradient", "lcb"])
    p.add_argument("--instances", type=int, default=4)
    p.add_argument("--budget", type=int, default=50)
    p.add_argument("--interval", type=float, default=1.0, help="box half-width in stds (library default 1)")
    p.add_argument("--prior-scale", type=float, default=1.0, help="lengthscale_prior_scale (library default 1)")
    p.add_argument("--out", default=str(RESULTS / "local_gradient_calibration.txt"))
    args = p.parse_args()
    warnings.simplefilter("ignore")
    t0 = time.process_time()
    out = [
        "LocalGPExplainer: two-std coverage of the true gradient on smooth black boxes "
        f"(benchmarks/local_gradient_calibration.py {' '.join(sys.argv[1:])})",
        f"4 black boxes x {args.instances} instances x 6 features, budget {args.budget}, interval {args.interval:g}, "
        f"lengthscale_prior_scale {args.prior_scale:g}, library defaults otherwise (linear_trend=True).",
        "",
    ]
    for acq in args.acquisitions:
        for noise in (None, 1e-6):
            lines, covered, total, med = sweep(acq, noise, args.instances, args.budget, args.interval, args.prior_scale)
            label = "learned" if noise is None else f"{noise:g}"
            out.append(
                f"{acq:9s} attribution_noise={label:8s} covered {covered:3d} / {total} ({covered / total:.2f}), "
                f"median |z| {med:.2f}"
            )
            out += lines
            print("\n".join(out[-5:]), flush=True)
    out += ["", f"CPU time of the sweep: {time.process_time() - t0:.0f} s"]
    Path(args.out).write_text("\n".join(out) + "\n")
    print(out[-1])


if __name__ == "__main__":
    main()
