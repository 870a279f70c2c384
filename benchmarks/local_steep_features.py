#!/usr/bin/env python3
"""Gradient coverage of ``LocalGPExplainer`` on smooth black boxes with steep features near ``x``.

Random black boxes f(z) = z·a + Σⱼ bⱼ tanh(kⱼ(zⱼ − cⱼ)) on D standard-normal features (300 training rows), with
aⱼ ~ U(−1, 1), bⱼ ~ U(−1.5, 1.5) on about half the features (0 on the rest), kⱼ ~ U(1, 6) and cⱼ = xⱼ + U(−1, 1):
the slope of a steep feature changes within a few stencil steps of ``x``, where a forward difference's
truncation error :math:`h f''/2` is largest. Case ``i`` draws its black box from ``RandomState(100 + i)`` and
explains its first training row with ``seed=i``. Per setting: how many true gradients lie outside two of the
reported stds, the median and mean |error| and the median and mean std (user units), and the CPU seconds per
explanation. The two settings differ only in ``stencil_completion``: 0.5 (the default: the forward stencil completed
to central differences) against 0 (forward differences only), so the ratios are measured in the same run.
``relevance_prior="lognormal", relevance_bootstrap=0``: the gradient does not depend on them (faster).

Usage::

    PYTHONPATH=$PWD python benchmarks/local_steep_features.py [--grid 8:40:24:forward 12:30:16 12:20:16 30:50:8]

Each ``--grid`` entry is ``features:budget:cases[:stencil_kind]`` (``stencil_kind`` ``"auto"`` unless given:
central where it takes at most half of the budget, else forward).
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


def case(D: int, i: int):
    """``(f, training data, x, true gradient at x)`` of case ``i``."""
    rs = np.random.RandomState(100 + i)
    X = rs.randn(300, D)
    x = X[0]
    a = rs.uniform(-1, 1, D)
    b = rs.uniform(-1.5, 1.5, D) * (rs.rand(D) < 0.5)
    k = rs.uniform(1, 6, D)
    c = x + rs.uniform(-1, 1, D)

    def f(Z: np.ndarray) -> np.ndarray:
        return Z @ a + (b * np.tanh(k * (Z - c))).sum(1)

    return f, X, x, a + b * k / np.cosh(k * (x - c)) ** 2


def run(D: int, budget: int, cases: int, kind: str, completion: float) -> dict:
    errs, stds, outside, cpu, completed, design = [], [], 0, 0.0, 0, None
    for i in range(cases):
        f, X, x, truth = case(D, i)
        ex = LocalGPExplainer(
            f,
            X,
            budget=budget,
            seed=i,
            stencil_kind=kind,
            stencil_completion=completion,
            relevance_prior="lognormal",
            relevance_bootstrap=0,
        )
        design = ex.stencil_kind
        t = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ex.explain(x)
        cpu += time.process_time() - t
        err = np.abs(res.gradient_mean - truth)
        errs += list(err)
        stds += list(res.gradient_std)
        outside += int((err > 2 * res.gradient_std).sum())
        completed += len(ex._backward)
    return dict(
        design=design,
        calls=ex._completion_calls,
        outside=outside,
        total=D * cases,
        completed=completed,
        med_err=float(np.median(errs)),
        mean_err=float(np.mean(errs)),
        med_std=float(np.median(stds)),
        mean_std=float(np.mean(stds)),
        cpu=cpu / cases,
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", nargs="+", default=["8:40:24:forward", "12:30:16", "12:20:16", "30:50:8"])
    p.add_argument("--out", default=str(RESULTS / "local_steep_features.txt"))
    args = p.parse_args(argv)
    lines = [
        "LocalGPExplainer on random black boxes with steep tanh features near x: stencil_completion=0.5 (the "
        "default) against 0",
        f"command: PYTHONPATH=$PWD python benchmarks/local_steep_features.py {' '.join(sys.argv[1:])}".rstrip(),
        "",
        f"{'D':>3}{'budget':>7}{'cases':>6} {'design':<8}{'completion':>11}{'calls':>6}{'completed':>10}"
        f"{'outside 2 std':>15}{'med |err|':>10}{'mean |err|':>11}{'med std':>9}{'mean std':>9}{'cpu s':>7}",
    ]
    print("\n".join(lines), flush=True)
    for cell in args.grid:
        parts = cell.split(":")
        D, budget, cases = (int(v) for v in parts[:3])
        kind = parts[3] if len(parts) > 3 else "auto"
        rows = {}
        for completion in (0.0, 0.5):
            r = run(D, budget, cases, kind, completion)
            rows[completion] = r
            cover = f"{r['outside']}/{r['total']}"
            line = (
                f"{D:>3}{budget:>7}{cases:>6} {r['design']:<8}{completion:>11.1f}{r['calls']:>6}{r['completed']:>10}"
                f"{cover:>15}{r['med_err']:>10.4f}{r['mean_err']:>11.4f}"
                f"{r['med_std']:>9.4f}{r['mean_std']:>9.4f}{r['cpu']:>7.1f}"
            )
            lines.append(line)
            print(line, flush=True)
        a, b = rows[0.0], rows[0.5]
        ratio = (
            f"    ratio 0.5 / 0: outside {b['outside'] / max(a['outside'], 1):.2f}, mean |err| "
            f"{b['mean_err'] / a['mean_err']:.2f}, mean std {b['mean_std'] / a['mean_std']:.2f}"
        )
        lines.append(ratio)
        print(ratio, flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
