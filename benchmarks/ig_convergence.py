#!/usr/bin/env python3
"""Butler et al. (integrated-gradient attributions of GPs): quadrature rules and random-feature GPs against
our exact IG posterior.

1. **Appendix C.1** (their Figure 7): the IG attribution of a GPR with an ARD-SE kernel on Wine, computed by
   the right-hand Riemann sum, the trapezoid rule and Simpson's rule over L partitions of the path, each
   applied to the *posterior of the gradient* (``PosteriorGradient`` at the L (+1) path points, joint
   covariance), against the exact attribution GP (``PosteriorIntegratedGradients``, closed form for RBF/ARD). We
   report the error of the mean and of the std, against L and against the number of gradient evaluations.
2. **Figure 5**: random-feature GPs (GPyTorch's ``RFFKernel`` with M frequencies, the exact model's
   hyperparameters, ``PosteriorIntegratedGradients`` in closed form for RFF kernels) against the exact GP: the
   attribution to alcohol of one test wine, per realisation (bias and spread of the mean over R draws of
   the frequencies) and for the "marginalised" RFGP (the equal-weight mixture of the R Gaussians).

Setup: red wine (1,599 rows, 11 features), x and y standardised, an 800-row training subset, baseline = the
training mean (0), float64, hyperparameters by L-BFGS on the exact marginal likelihood.

Usage: ``PYTHONPATH=$PWD python benchmarks/ig_convergence.py [--quick]``; output in
``benchmarks/results/ig_convergence.txt``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gpytorch
import numpy as np
import torch

from gpytorch_explain import PosteriorGradient, PosteriorIntegratedGradients

DATA = Path("/work/shared/datasets")
RESULTS = Path(__file__).resolve().parent / "results"


class GP(gpytorch.models.ExactGP):
    def __init__(self, x, y, covar):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = covar

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def load_red_wine() -> tuple[np.ndarray, np.ndarray, list[str]]:
    import csv

    with open(DATA / "wine_quality_red.csv") as fh:
        rows = list(csv.reader(fh))
    a = np.array([[float(v) for v in r] for r in rows[1:]])
    x, y = a[:, :-1], a[:, -1]
    return (x - x.mean(0)) / x.std(0), (y - y.mean()) / y.std(), rows[0][:-1]


def rule(name: str, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes t in [0, 1] and weights of a composite rule with L partitions."""
    if name == "riemann (right-hand)":
        return np.arange(1, L + 1) / L, np.full(L, 1.0 / L)
    t = np.arange(L + 1) / L
    if name == "trapezoid":
        w = np.full(L + 1, 1.0 / L)
        w[[0, -1]] /= 2
        return t, w
    if name == "simpson":
        if L % 2:
            raise ValueError("Simpson needs an even L")
        w = np.ones(L + 1)
        w[1:-1:2], w[2:-1:2] = 4, 2
        return t, w / (3 * L)
    raise ValueError(name)


def quadrature_ig(grad: PosteriorGradient, x: torch.Tensor, b: torch.Tensor, j: int, t, w):
    """Mean and std of (x_j - b_j) Σ_l w_l ∂_j f(b + t_l (x - b)) under the gradient posterior."""
    tt = torch.as_tensor(t, dtype=x.dtype)
    ww = torch.as_tensor(w, dtype=x.dtype)
    path = b + tt[:, None] * (x - b)
    post = grad(path)  # joint over (point, feature), index point * D + feature
    D = x.numel()
    idx = torch.arange(len(tt)) * D + j
    cov = post.covariance_matrix[idx][:, idx]
    scale = x[j] - b[j]
    mean = scale * (ww @ post.mean[:, j])
    var = scale**2 * (ww @ cov @ ww)
    return float(mean), float(var.clamp_min(0).sqrt())


def fit(model, iters: int):
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=iters, line_search_fn="strong_wolfe")
    x, y = model.train_inputs[0], model.train_targets

    def closure():
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        return loss

    opt.step(closure)
    return model.eval()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n-train", type=int, default=800)
    p.add_argument("--points", type=int, default=10, help="test points for the quadrature study")
    p.add_argument("--draws", type=int, default=30, help="RFGP realisations per M (the paper uses 500)")
    args = p.parse_args()
    if args.quick:
        args.n_train, args.points, args.draws = 300, 3, 10
    torch.manual_seed(0)
    x, y, names = load_red_wine()
    perm = np.random.default_rng(0).permutation(len(x))
    tr, te = perm[: args.n_train], perm[args.n_train :]
    X, Y = torch.as_tensor(x[tr]), torch.as_tensor(y[tr])
    D = X.size(1)
    j = names.index("alcohol")
    exact_model = GP(X, Y, gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D))).double()
    exact_model.likelihood.noise = 0.1
    fit(exact_model, 100)
    b = torch.zeros(D, dtype=torch.float64)
    ig = PosteriorIntegratedGradients(exact_model, baseline=b)
    grad = PosteriorGradient(exact_model)
    xs = torch.as_tensor(x[te[: args.points]])
    exact = ig(xs)
    ex_mean, ex_std = exact.mean[:, j].detach(), exact.variance[:, j].clamp_min(0).sqrt().detach()

    out = [
        "# Butler et al.: quadrature IG and random-feature GPs against the exact IG posterior",
        "",
        f"Generated by `benchmarks/ig_convergence.py{' --quick' if args.quick else ''}`. Red wine, "
        f"{args.n_train} training rows, ARD-SE GPR, baseline 0 (training mean), feature 'alcohol'.",
        f"Fitted: noise {exact_model.likelihood.noise.item():.4f}, outputscale "
        f"{exact_model.covar_module.outputscale.item():.4f}.",
        "",
        f"## 1. Quadrature rules vs exact IG (Appendix C.1), mean over {args.points} test points",
        "",
        "Errors relative to the exact value, |approx - exact| / |exact|, averaged over points. "
        "evals = gradient evaluations on the path.",
        "",
        "| rule | L | evals | rel. error of mean | rel. error of std |",
        "|---|---|---|---|---|",
    ]
    for name in ("riemann (right-hand)", "trapezoid", "simpson"):
        for L in (2, 4, 8, 16, 32, 64, 128):
            t, w = rule(name, L)
            em, es = [], []
            for i in range(len(xs)):
                m_, s_ = quadrature_ig(grad, xs[i], b, j, t, w)
                em.append(abs(m_ - ex_mean[i].item()) / abs(ex_mean[i].item()))
                es.append(abs(s_ - ex_std[i].item()) / ex_std[i].item())
            out.append(f"| {name} | {L} | {len(t)} | {np.mean(em):.2e} | {np.mean(es):.2e} |")
    out += [
        "",
        "Expected orders: right-hand Riemann O(1/L), trapezoid O(1/L²), Simpson O(1/L⁴) (smooth integrand).",
        "",
    ]

    # ---- Figure 5: random-feature GPs
    i0 = 0
    mu0, sd0 = ex_mean[i0].item(), ex_std[i0].item()
    out += [
        "## 2. Random-feature GP vs exact GP (Figure 5)",
        "",
        f"Test point 0: exact attribution to alcohol {mu0:.4f} ± {sd0:.4f} (± 1 posterior std).",
        "RFGP: `ScaleKernel(RFFKernel(M))` (M frequencies, 2M cos/sin features) with the exact model's "
        "lengthscales, output scale and noise; "
        f"{args.draws} independent draws of the frequencies per M. 'marginalised' = equal mixture of the draws.",
        "",
        "| M | mean of draws' means | std of draws' means | mean of draws' stds | marginalised mean ± std "
        "| time per draw (s) |",
        "|---|---|---|---|---|---|",
    ]
    ls = exact_model.covar_module.base_kernel.lengthscale.detach()
    for M in (10, 50, 100, 500, 1000) if not args.quick else (10, 100):
        means, sds = [], []
        t0 = time.perf_counter()
        for r in range(args.draws):
            torch.manual_seed(1000 + r)
            k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RFFKernel(num_samples=M, num_dims=D, ard_num_dims=D))
            rf = GP(X, Y, k).double()
            rf.covar_module.base_kernel.lengthscale = ls
            rf.covar_module.outputscale = exact_model.covar_module.outputscale.detach()
            rf.likelihood.noise = exact_model.likelihood.noise.detach()
            rf.eval()
            a = PosteriorIntegratedGradients(rf, baseline=b)(xs[i0 : i0 + 1])
            means.append(a.mean[0, j].item())
            sds.append(a.variance[0, j].clamp_min(0).sqrt().item())
        dt = (time.perf_counter() - t0) / args.draws
        means, sds = np.array(means), np.array(sds)
        mix_mean = means.mean()
        mix_sd = np.sqrt((sds**2 + means**2).mean() - mix_mean**2)
        out.append(
            f"| {M} | {means.mean():.4f} | {means.std(ddof=1):.4f} | {sds.mean():.4f} | "
            f"{mix_mean:.4f} ± {mix_sd:.4f} | {dt:.3f} |"
        )
    out += ["", f"Exact: {mu0:.4f} ± {sd0:.4f}."]
    text = "\n".join(out)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / ("ig_convergence_quick.txt" if args.quick else "ig_convergence.txt")).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
