#!/usr/bin/env python3
"""Are ``LocalGPExplainer``'s gradient stds honest? Two-std coverage of the true gradient on smooth black boxes.

Six smooth black boxes with known gradients on 6 features, 300 Gaussian training rows each, explained at the first
``--instances`` training rows (``seed`` = the row index) with a budget of 50 calls:

* on features of different scales (stds 1, 10, 0.1, 1, 5, 1; data seed 0):

  * ``linsin``: a linear score x·a/σ plus a weak interaction 0.1 sin(x₀x₃) that oscillates across the box;
  * ``quad``: x₀² + (x₁/10)(x₂/0.1);
  * ``logistic``: the logistic function of the linear score;
  * ``sincos``: sin x₀ + cos x₃ + 0.3 x₅;

* the issue's toy f = x·a + 0.1 sin(x₀x₁), a = (1, −2, 0, 0.5, 0, 3) (data seed 3), on unit-scale features
  (``toy_unit``) and on features with stds (1, 2, 5, 0.5, 0.01, 1) (``toy_scaled``, where x₀x₁ sweeps several
  radians across the box).

For each acquisition, ``stencil`` ("auto", the default, which is on for 6 features at 50 calls, and None) and
``attribution_noise`` (None = learned, the default, and 1e-6) it prints, per black box, the number of features
whose true gradient lies within two posterior stds of ``gradient_mean``, the total, the median |z| and the
largest |z| (z = (mean − truth) / std; for calibrated Gaussian intervals about 95 % coverage and median |z| ≈
0.67). The CPU time is the whole sweep's.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_gradient_calibration.py [--acquisitions lcb variance gradient]
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
TOY_A = np.array([1.0, -2.0, 0.0, 0.5, 0.0, 3.0])
TOY_SCALES = np.array([1.0, 2.0, 5.0, 0.5, 0.01, 1.0])


def _sigmoid(t):
    return 1.0 / (1.0 + np.exp(-t))


def black_boxes() -> dict:
    """name -> (f: (m, 6) -> (m,), gradient: (6,) -> (6,), training data (300, 6))."""

    def linsin_grad(x):
        g = A / SCALES
        c = 0.1 * np.cos(x[0] * x[3])
        return g + c * np.array([x[3], 0, 0, x[0], 0, 0])

    def logistic_grad(x):
        p = _sigmoid((x / SCALES) @ A)
        return p * (1 - p) * A / SCALES

    def toy_grad(x):
        return TOY_A + 0.1 * np.cos(x[0] * x[1]) * np.array([x[1], x[0], 0, 0, 0, 0])

    def toy(X):
        return X @ TOY_A + 0.1 * np.sin(X[:, 0] * X[:, 1])

    scaled = np.random.default_rng(0).normal(size=(300, 6)) * SCALES
    unit = np.random.default_rng(3).normal(size=(300, 6))
    return {
        "linsin": (lambda X: (X / SCALES) @ A + 0.1 * np.sin(X[:, 0] * X[:, 3]), linsin_grad, scaled),
        "quad": (
            lambda X: X[:, 0] ** 2 + (X[:, 1] / 10) * (X[:, 2] / 0.1),
            lambda x: np.array([2 * x[0], x[2] / 0.1 / 10, x[1] / 10 / 0.1, 0, 0, 0]),
            scaled,
        ),
        "logistic": (lambda X: _sigmoid((X / SCALES) @ A), logistic_grad, scaled),
        "sincos": (
            lambda X: np.sin(X[:, 0]) + np.cos(X[:, 3]) + 0.3 * X[:, 5],
            lambda x: np.array([np.cos(x[0]), 0, 0, -np.sin(x[3]), 0, 0.3]),
            scaled,
        ),
        "toy_unit": (toy, toy_grad, unit),
        "toy_scaled": (toy, toy_grad, unit * TOY_SCALES),
    }


def sweep(
    acquisition: str,
    noise: float | None,
    stencil,
    instances: int,
    budget: int,
    interval: float = 1.0,
    prior_scale: float = 1.0,
) -> tuple[list[str], int, int, float, float]:
    lines, covered, total, zs = [], 0, 0, []
    for name, (f, grad, data) in black_boxes().items():
        hits, box_z = 0, []
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
                stencil=stencil,
            )
            res = ex.explain(data[i])
            z = (res.gradient_mean - grad(data[i])) / np.maximum(res.gradient_std, 1e-300)
            hits += int((np.abs(z) <= 2).sum())
            box_z.extend(np.abs(z).tolist())
        lines.append(f"    {name:11s} {hits:3d} / {6 * instances}   max |z| {max(box_z):6.1f}")
        covered += hits
        total += 6 * instances
        zs.extend(box_z)
    return lines, covered, total, float(np.median(zs)), float(np.max(zs))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--acquisitions", nargs="+", default=["lcb"])
    p.add_argument("--instances", type=int, default=8)
    p.add_argument("--budget", type=int, default=50)
    p.add_argument("--interval", type=float, default=1.0, help="box half-width in stds (library default 1)")
    p.add_argument("--prior-scale", type=float, default=1.0, help="lengthscale_prior_scale (library default 1)")
    p.add_argument("--stencils", nargs="+", default=["auto", "none"], help="stencil settings ('auto', 'none', δ)")
    p.add_argument("--out", default=str(RESULTS / "local_gradient_calibration.txt"))
    args = p.parse_args()
    warnings.simplefilter("ignore")
    t0 = time.process_time()
    out = [
        "LocalGPExplainer: two-std coverage of the true gradient on smooth black boxes "
        f"(benchmarks/local_gradient_calibration.py {' '.join(sys.argv[1:])})",
        f"6 black boxes x {args.instances} instances x 6 features, budget {args.budget}, interval {args.interval:g}, "
        f"lengthscale_prior_scale {args.prior_scale:g}, library defaults otherwise (linear_trend=True).",
        "",
    ]
    for acq in args.acquisitions:
        for st in args.stencils:
            stencil = None if st == "none" else (st if st == "auto" else float(st))
            for noise in (None, 1e-6):
                lines, covered, total, med, mx = sweep(
                    acq, noise, stencil, args.instances, args.budget, args.interval, args.prior_scale
                )
                label = "learned" if noise is None else f"{noise:g}"
                out.append(
                    f"{acq:9s} stencil={st:5s} attribution_noise={label:8s} covered {covered:3d} / {total} "
                    f"({covered / total:.2f}), median |z| {med:.2f}, max |z| {mx:.1f}"
                )
                out += lines
                print("\n".join(out[-7:]), flush=True)
    out += ["", f"CPU time of the sweep: {time.process_time() - t0:.0f} s"]
    Path(args.out).write_text("\n".join(out) + "\n")
    print(out[-1])


if __name__ == "__main__":
    main()
