#!/usr/bin/env python3
"""Calibration of GPX's weight intervals at scale, over several draws of the synthetic GPX prior.

``benchmarks/scale.py`` reports the 95% coverage of the true local weights for one synthetic data set,
that is for *one* draw of the weight functions :math:`g_l \\sim \\mathcal{GP}(0, k)`. That number is
noisy: the weights are only partly identified by :math:`y = \\mathbf w^\\top \\mathbf z + \\varepsilon`
(for instance :math:`g_1 = x_2 h(\\mathbf x)`, :math:`g_2 = -x_1 h(\\mathbf x)` adds nothing to
:math:`y`), so a good part of the posterior is prior-driven, and whether one draw's weights fall inside
the intervals depends on how typical that draw is, and on the output scale fitted to it. The test
points of one draw share all of this, so their coverage is not an average over independent events.
This script repeats the experiment over ``--draws`` independent draws (seeds) and reports each
draw's coverage and the pooled coverage with the spread between draws.

For each ``n`` and each draw:

1. data from the GPX prior exactly as in ``scale.py --dataset synthetic`` (``x ~ N(0, I_D)``, ``z = x``,
   RBF weight functions with lengthscale and output scale 1, weight noise and noise variance 0.01);
2. the hyperparameters (and the inducing locations) fitted by ``GPXModel.fit`` on a random
   ``--subset`` of the rows, with ``--inducing`` inducing points (the collapsed bound is tight there);
3. the model conditioned on all ``n`` rows with those hyperparameters (inducing-space solves, exact
   for the inducing-point kernel), and on the subset alone for comparison;
4. the 95% intervals of :math:`\\mathbf w_*` at ``--n-test`` test points against the true weights.

Usage (from the repository root, with the package importable)::

    python benchmarks/calibration.py --n 100000 400000 --draws 5
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import gpytorch
import torch
from gpytorch.kernels import InducingPointKernel, RBFKernel, ScaleKernel

from gpytorch_explain import GPXModel

try:  # run as a script from the repository root or as a module
    from scale import build_parser as scale_parser
    from scale import load_data, make_kernel
except ImportError:  # pragma: no cover
    from benchmarks.scale import build_parser as scale_parser
    from benchmarks.scale import load_data, make_kernel

Z95 = 1.959964


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _coverage(model: GPXModel, x_test: torch.Tensor, w_true: torch.Tensor) -> tuple[float, list[float], float, float]:
    with torch.no_grad():
        post = model.predict_weights(x_test)
        mean, std = post.mean, post.variance.clamp_min(0).sqrt()
    inside = ((w_true - mean).abs() <= Z95 * std).double()
    rmse = (w_true - mean).pow(2).mean().sqrt().item()
    return inside.mean().item(), inside.mean(0).tolist(), rmse, std.mean().item()


def one_draw(n: int, seed: int, args) -> dict:
    sargs = scale_parser().parse_args(
        ["--dataset", "synthetic", "--n", str(n), "--n-test", str(args.n_test), "--seed", str(seed)]
        + ["--dims", str(args.dims), "--inducing", str(args.inducing), "--method", args.method]
    )
    data = load_data(sargs)
    x, y, x_test, w_true = data["x"], data["y"], data["x_test"], data["w_test"]
    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
    likelihood.noise = 0.01
    kernel = make_kernel(sargs, x, likelihood).double()
    sub = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 2))[: min(args.subset, n)]

    t0 = time.perf_counter()
    sub_model = GPXModel(x[sub], y[sub], likelihood=likelihood, base_kernel=kernel)
    fit_model = sub_model
    if args.exact_subset and isinstance(kernel, InducingPointKernel):
        # hyperparameters from the exact GPX likelihood (Cholesky) with the inducing kernel's own base kernel,
        # which is the same module: no collapsed-bound bias, and nothing to copy
        rows = sub[: args.exact_subset]
        fit_model = GPXModel(x[rows], y[rows], likelihood=likelihood, base_kernel=kernel.base_kernel)
    scale = next(m for m in kernel.modules() if isinstance(m, ScaleKernel))
    rbf = next(m for m in kernel.modules() if isinstance(m, RBFKernel))
    if args.true_hypers:  # the generating values: checks the inference, not the hyperparameter fit
        scale.outputscale = sargs.true_outputscale
        rbf.lengthscale = sargs.true_lengthscale
        likelihood.noise = sargs.true_noise
        sub_model.weight_noise = sargs.true_weight_noise
    else:
        fit_model.fit(max_iter=args.max_iter)
        sub_model.weight_noise = fit_model.weight_noise.detach()
    t_fit = time.perf_counter() - t0
    sub_model.eval()
    sub_cov = _coverage(sub_model, x_test, w_true)

    t0 = time.perf_counter()
    model = GPXModel(x, y, likelihood=likelihood, base_kernel=kernel)
    model.weight_noise = sub_model.weight_noise.detach()
    model.eval()
    full_cov = _coverage(model, x_test, w_true)
    t_cond = time.perf_counter() - t0
    outputscale = scale.outputscale.item()
    lengthscale = rbf.lengthscale.detach().reshape(-1).tolist()
    return {
        "seed": seed,
        "fit_s": t_fit,
        "cond_s": t_cond,
        "hypers": (
            f"outputscale {outputscale:.3g}, lengthscale [{', '.join(f'{v:.3g}' for v in lengthscale)}], "
            f"noise {likelihood.noise.item():.3g}, weight noise {model.weight_noise.item():.3g}"
        ),
        "full": full_cov,
        "sub": sub_cov,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 400_000], help="training rows")
    parser.add_argument("--draws", type=int, default=5, help="independent synthetic data sets per n")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--n-test", type=int, default=5000)
    parser.add_argument("--subset", type=int, default=10_000, help="rows for the hyperparameter fit")
    parser.add_argument(
        "--method",
        choices=["sgpr", "kissgp"],
        default="sgpr",
        help="base kernel as in scale.py: inducing points, or a KISS-GP grid (GPX's exact grid features)",
    )
    parser.add_argument("--inducing", type=int, default=512)
    parser.add_argument("--max-iter", type=int, default=40)
    parser.add_argument(
        "--exact-subset",
        type=int,
        default=0,
        help="sgpr: fit the hyperparameters with the exact GPX likelihood (the inducing kernel's base kernel, "
        "Cholesky) on this many of the subset's rows instead of the collapsed bound",
    )
    parser.add_argument("--dims", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--true-hypers",
        action="store_true",
        help="use the generating hyperparameters (random inducing rows) instead of fitting them",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=gpytorch.utils.warnings.NumericalWarning)
    print(
        f"GPX weight calibration: synthetic GPX prior, D = d = {args.dims}, "
        + (f"M = {args.inducing} inducing points, " if args.method == "sgpr" else "KISS-GP grid (scale.py's), ")
        + (
            "the generating hyperparameters"
            if args.true_hypers
            else f"hyperparameters from the exact likelihood on {args.exact_subset} rows"
            if args.exact_subset and args.method == "sgpr"
            else f"hyperparameters from {args.subset} rows"
        )
        + f", {args.n_test} test points per draw, {args.draws} draws; "
        f"torch {torch.__version__}, gpytorch {gpytorch.__version__}, {torch.get_num_threads()} threads\n"
    )
    print(
        "| n | draw | fitted hyperparameters | fit s | condition + weights s | coverage (all rows) | by feature "
        "| weight RMSE | mean std | coverage (subset only) |"
    )
    print("| ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    summary = []
    for n in args.n:
        covs, subs = [], []
        for seed in range(args.first_seed, args.first_seed + args.draws):
            r = one_draw(n, seed, args)
            cov, by_feat, rmse, std = r["full"]
            covs.append(cov)
            subs.append(r["sub"][0])
            print(
                f"| {n} | {seed} | {r['hypers']} | {r['fit_s']:.1f} | {r['cond_s']:.1f} | {cov:.3f} "
                f"| {', '.join(f'{c:.3f}' for c in by_feat)} | {rmse:.3f} | {std:.3f} | {r['sub'][0]:.3f} |",
                flush=True,
            )
        c, s = torch.tensor(covs), torch.tensor(subs)
        spread = c.std().item() if len(covs) > 1 else float("nan")
        summary.append((n, c.mean().item(), spread, c.min().item(), c.max().item(), s.mean().item()))
    print(f"\npeak RSS {_rss_gib():.2f} GiB")
    print(
        "\n| n | pooled coverage (all rows) | sd between draws | min | max | pooled coverage (subset only) | target |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for n, mean, spread, lo, hi, sub in summary:
        ok = "OK" if 0.92 <= mean <= 0.98 else "MISS"
        print(f"| {n} | {mean:.3f} | {spread:.3f} | {lo:.3f} | {hi:.3f} | {sub:.3f} | 0.92-0.98: {ok} |")


if __name__ == "__main__":
    main()
