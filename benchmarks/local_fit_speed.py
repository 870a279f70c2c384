#!/usr/bin/env python3
"""Surrogate fitting cost: the dense objective against GPyTorch's marginal likelihood, in the same run.

``LocalGPExplainer`` fits its surrogates (the acquisition surrogate, the trend surrogate, the SAAS relevance
surrogate and its bootstrap refits) with BoTorch's L-BFGS-B loop on the objective of
``gpytorch_explain.local.dense_objective`` (``closure=dense_loss_closure(...)``); before, the loop evaluated
GPyTorch's ``ExactMarginalLogLikelihood``. For surrogates of the explainer's sizes (``n`` samples, ``d`` features,
a smooth function of uniform points in the box; hyperparameters after 30 warm-up iterations) it times

* one evaluation of the objective and its gradient (median of 5 repeats of ``--reps`` calls), with the largest
  differences of the value and of the gradient between the two;
* one fit of at most 200 L-BFGS-B iterations from the same start each way (``fit_gpytorch_mll_scipy``), its
  evaluations and the objective it ends at (the paths may part at round-off; the difference is reported).

and, end to end, the CPU time of whole explanations with the library's defaults at 50 calls, the same explanation
once each way, alternating (``gpytorch_explain.local.dense_objective.dense_fits(False)`` restores GPyTorch's
objective), on two synthetic black boxes: Friedman #1 (10 features, 5 without effect; the central stencil) and a
logistic of a random linear score plus an interaction in 30 features (the forward stencil; like the breast-cancer
SVC's probability). Ratios are GPyTorch / dense.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_fit_speed.py
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpytorch_explain.local import LocalGPExplainer  # noqa: E402 (imports BoTorch with GPyTorch's defaults kept)
from gpytorch_explain.local.dense_objective import dense_fits, dense_loss_closure  # noqa: E402
from gpytorch_explain.local.surrogate import (  # noqa: E402
    fit_surrogate,
    make_relevance_surrogate,
    make_surrogate,
    make_trend_surrogate,
)

RESULTS = Path(__file__).resolve().parent / "results"
DT = torch.float64


def _surrogates(n: int, d: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    U = torch.rand(n, d, generator=g, dtype=DT) * 2 - 1
    w = torch.randn(d, generator=g, dtype=DT)
    y = torch.sin(U @ w / d**0.5) + 0.3 * U[:, 0] * U[:, -1] + 0.5 * U[:, 1]
    base = make_surrogate(U, (y - y.mean()) / y.std())
    out = {"ard-rbf": base, "trend": make_trend_surrogate(base), "saas": make_relevance_surrogate(base)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in out.values():
            fit_surrogate(model, maxiter=30, final=False)
    return out


def _closures(model):
    from botorch.optim.closures import get_loss_closure_with_grads
    from botorch.optim.utils import get_parameters_and_bounds
    from gpytorch.mlls import ExactMarginalLogLikelihood

    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    model.train()
    params, _ = get_parameters_and_bounds(mll)
    params = {k: p for k, p in params.items() if p.requires_grad}
    return mll, params, get_loss_closure_with_grads(mll, params), dense_loss_closure(mll, params)


def _eval_ms(closure, reps: int) -> float:
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            closure()
        times.append((time.perf_counter() - t) / reps * 1e3)
    return statistics.median(times)


def _fit(model, dense: bool) -> tuple[float, int, float]:
    from botorch.optim.fit import fit_gpytorch_mll_scipy

    model = copy.deepcopy(model)
    mll, params, slow, fast = _closures(model)
    closure = fast if dense else slow
    count = [0]

    def counted():
        count[0] += 1
        return closure()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        result = fit_gpytorch_mll_scipy(mll, parameters=params, closure=counted, options={"maxiter": 200})
        seconds = time.perf_counter() - t
    return seconds, count[0], float(result.fval)


def _black_boxes() -> dict:
    import numpy as np

    rng = np.random.RandomState(0)

    def friedman(Z):
        return 10 * np.sin(np.pi * Z[:, 0] * Z[:, 1]) + 20 * (Z[:, 2] - 0.5) ** 2 + 10 * Z[:, 3] + 5 * Z[:, 4]

    a = rng.randn(30) / np.sqrt(30)

    def logistic(Z):
        return 1.0 / (1.0 + np.exp(-(3 * Z @ a + Z[:, 0] * Z[:, 1])))

    return {
        "friedman1 (10 feat.)": (friedman, rng.rand(500, 10)),
        "logistic (30 feat.)": (logistic, rng.randn(500, 30)),
    }


def _explanation_cpu(f, X, seed: int, dense: bool) -> float:
    with dense_fits(dense), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.process_time()
        LocalGPExplainer(f, X, budget=50, seed=seed).explain(X[seed])
        return time.process_time() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["25x6", "50x13", "50x30", "100x30"], help="n x d")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--explanations", type=int, default=3, help="explanations per black box (seeds 0..k-1)")
    p.add_argument("--out", default=str(RESULTS / "local_fit_speed.txt"))
    args = p.parse_args()
    torch.set_num_threads(1)  # as LocalGPExplainer(num_threads=1), the default
    lines = [
        f"Surrogate fitting cost, dense objective vs GPyTorch's marginal likelihood (benchmarks/local_fit_speed.py "
        f"{' '.join(sys.argv[1:])}); one thread, float64; ms = one evaluation of the objective + gradient (median); "
        "fit = at most 200 L-BFGS-B iterations from the same start (s, evaluations, final objective per sample); "
        "ratio = GPyTorch / dense.",
        "",
        f"{'n x d':>8} {'surrogate':>9} {'ms gpyt':>8} {'ms dense':>9} {'ratio':>6} {'|d value|':>10} {'|d grad|':>9}"
        f" {'fit s gpyt':>11} {'evals':>6} {'fit s dense':>12} {'evals':>6} {'ratio':>6} {'final gpyt - dense':>19}",
    ]
    print("\n".join(lines), flush=True)
    for size in args.sizes:
        n, d = (int(v) for v in size.split("x"))
        for name, model in _surrogates(n, d).items():
            _, params, slow, fast = _closures(model)
            v_slow, g_slow = slow()
            g_slow = [g.clone() for g in g_slow]
            v_fast, g_fast = fast()
            dv = abs(float(v_slow.detach() - v_fast.detach()))
            dg = max(float((a - b).abs().max()) for a, b in zip(g_slow, g_fast, strict=True))
            ms_slow, ms_fast = _eval_ms(slow, args.reps), _eval_ms(fast, args.reps)
            s_slow, n_slow, f_slow = _fit(model, dense=False)
            s_fast, n_fast, f_fast = _fit(model, dense=True)
            lines.append(
                f"{size:>8} {name:>9} {ms_slow:8.3f} {ms_fast:9.3f} {ms_slow / ms_fast:6.2f} {dv:10.1e} {dg:9.1e}"
                f" {s_slow:11.3f} {n_slow:6d} {s_fast:12.3f} {n_fast:6d} {s_slow / s_fast:6.2f} {f_slow - f_fast:19.2e}"
            )
            print(lines[-1], flush=True)
    lines += [
        "",
        f"End to end: CPU s per explanation with the defaults at 50 calls ({args.explanations} seeds, each explained "
        "once each way, alternating; mean)",
        f"{'black box':>22} {'s gpytorch':>11} {'s dense':>8} {'ratio':>6}",
    ]
    print("\n".join(lines[-3:]), flush=True)
    for name, (f, X) in _black_boxes().items():
        slow, fast = [], []
        for seed in range(args.explanations):
            slow.append(_explanation_cpu(f, X, seed, dense=False))
            fast.append(_explanation_cpu(f, X, seed, dense=True))
        s_slow, s_fast = statistics.mean(slow), statistics.mean(fast)
        lines.append(f"{name:>22} {s_slow:11.2f} {s_fast:8.2f} {s_slow / s_fast:6.2f}")
        print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
