#!/usr/bin/env python3
"""Acquisition evaluation cost: the cached exact posterior against GPyTorch's prediction path, in the same run.

``make_acquisition(..., cached=True)`` (the explainer's path) evaluates the analytic acquisitions through
``gpytorch_explain.local.cached_posterior.CachedPosteriorModel``; ``cached=False`` through the surrogate's own
``posterior`` (GPyTorch's ``ExactGP`` prediction strategy). For surrogates of the explainer's sizes (``n`` samples,
``d`` features; an ARD-RBF ``SingleTaskGP`` fitted on a smooth function of uniform points in the box) it times

* one evaluation of the acquisition and its gradient for a batch of 2 candidates (what each L-BFGS-B step of BoTorch's
  ``optimize_acqf`` does with the explainer's 2 restarts), median of repeated timings;
* one whole ``optimize_acqf`` call with the explainer's settings (2 restarts, 32 raw samples, 50 iterations;
  median of 3 seeds),

and checks that both paths give the same acquisition values (max abs difference). Ratios are uncached / cached.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_acquisition_speed.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpytorch_explain.local import ACQUISITIONS  # noqa: E402,F401 (imports BoTorch with GPyTorch's defaults kept)
from gpytorch_explain.local.acquisition import make_acquisition  # noqa: E402
from gpytorch_explain.local.surrogate import fit_surrogate, make_surrogate  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DT = torch.float64


def _surrogate(n: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    U = torch.rand(n, d, generator=g, dtype=DT) * 2 - 1
    w = torch.randn(d, generator=g, dtype=DT)
    y = torch.sin(U @ w / d**0.5) + 0.3 * U[:, 0] * U[:, -1]
    model = make_surrogate(U, (y - y.mean()) / y.std())
    fit_surrogate(model, maxiter=60, final=False)
    return model.eval()


def _eval_ms(acq, X0: torch.Tensor, reps: int) -> float:
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            X = X0.clone().requires_grad_(True)
            torch.autograd.grad(acq(X).sum(), X)
        times.append((time.perf_counter() - t) / reps * 1e3)
    return statistics.median(times)


def _optimize_s(acq, d: int) -> float:
    from botorch.optim import optimize_acqf

    bounds = torch.stack([-torch.ones(d, dtype=DT), torch.ones(d, dtype=DT)])
    times = []
    for seed in range(3):
        t = time.perf_counter()
        optimize_acqf(
            acq,
            bounds=bounds,
            q=1,
            num_restarts=2,
            raw_samples=32,
            options={"maxiter": 50, "seed": seed},
            retry_on_optimization_warning=False,
        )
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["25x6", "50x13", "50x30", "100x30"], help="n x d")
    p.add_argument("--acquisitions", nargs="+", default=["variance", "lcb", "ei"])
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--out", default=str(RESULTS / "local_acquisition_speed.txt"))
    args = p.parse_args()
    torch.set_num_threads(1)  # as LocalGPExplainer(num_threads=1), the default
    lines = [
        f"Acquisition cost, cached exact posterior vs GPyTorch's path (benchmarks/local_acquisition_speed.py "
        f"{' '.join(sys.argv[1:])}); one thread, float64; ms = one evaluation + gradient for 2 candidates (median), "
        "s = one optimize_acqf call (2 restarts, 32 raw samples, 50 iterations; median of 3); "
        "ratio = GPyTorch / cached.",
        "",
        f"{'n x d':>8} {'acq':>9} {'ms gpytorch':>12} {'ms cached':>10} {'ratio':>6} {'s gpytorch':>11} "
        f"{'s cached':>9} {'ratio':>6} {'max |diff|':>11}",
    ]
    print("\n".join(lines), flush=True)
    for size in args.sizes:
        n, d = (int(v) for v in size.split("x"))
        model = _surrogate(n, d)
        u0 = torch.zeros(d, dtype=DT)
        bounds = torch.stack([-torch.ones(d, dtype=DT), torch.ones(d, dtype=DT)])
        X0 = torch.rand(2, 1, d, dtype=DT, generator=torch.Generator().manual_seed(1)) * 2 - 1
        Xcheck = torch.rand(256, 1, d, dtype=DT, generator=torch.Generator().manual_seed(2)) * 2 - 1
        for name in args.acquisitions:
            slow = make_acquisition(name, model, u0, bounds, cached=False)
            fast = make_acquisition(name, model, u0, bounds)
            with torch.no_grad():
                diff = float((slow(Xcheck) - fast(Xcheck)).abs().max())
            ms_slow, ms_fast = _eval_ms(slow, X0, args.reps), _eval_ms(fast, X0, args.reps)
            s_slow, s_fast = _optimize_s(slow, d), _optimize_s(fast, d)
            lines.append(
                f"{size:>8} {name:>9} {ms_slow:12.3f} {ms_fast:10.3f} {ms_slow / ms_fast:6.2f} {s_slow:11.3f} "
                f"{s_fast:9.3f} {s_slow / s_fast:6.2f} {diff:11.1e}"
            )
            print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
