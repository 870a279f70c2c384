#!/usr/bin/env python3
"""Integrated-gradient attributions with uncertainty: they grow more uncertain away from the baseline.

A synthetic version of the first example of Seitz et al. (GP integrated-gradient attributions):
y = sin(x1) + 0.5 x2 + noise, observed on [0, 6]², explained along the diagonal path from the
baseline 0 to (6, 6). The script fits a GP, checks completeness (in mean and in variance), prints a
few attributions with their standard deviations, and writes two figures:

* ``attribution_path.png``: each feature's attribution along the path with ±2σ bands;
* ``attribution_bars.png``: the attributions of the end point with ±2σ error bars.

Run: ``python tutorials/attribution_uncertainty.py [--out-dir DIR]`` (needs the ``demo`` extra).
"""

from __future__ import annotations

import argparse
import pathlib

import gpytorch
import torch

from gpytorch_explain import PosteriorGradient, PosteriorIntegratedGradients
from gpytorch_explain.attribution import plot_attribution_bars, plot_attribution_path


class GPR(gpytorch.models.ExactGP):
    def __init__(self, x, y):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=2))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", type=pathlib.Path, default=pathlib.Path("."))
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.rand(60, 2, dtype=torch.float64) * 6
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(60, dtype=torch.float64)
    model = GPR(x, y).double()
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        return loss

    opt.step(closure)
    model.eval()

    baseline = torch.zeros(2, dtype=torch.float64)
    ig = PosteriorIntegratedGradients(model, baseline=baseline)
    path = torch.linspace(0, 1, 5, dtype=torch.float64).unsqueeze(-1) * torch.tensor([6.0, 6.0], dtype=torch.float64)
    with torch.no_grad():
        attr = ig(path)
        grad = PosteriorGradient(model)(path)
    print("point        IG_1 (± std)        IG_2 (± std)        ∂f/∂x1 (± std)")
    for p in range(path.size(0)):
        m, s = attr.mean[p], attr.variance[p].sqrt()
        print(
            f"({path[p, 0]:.1f}, {path[p, 1]:.1f})  {m[0]:+.3f} ± {s[0]:.3f}     {m[1]:+.3f} ± {s[1]:.3f}"
            f"     {grad.mean[p, 0]:+.3f} ± {grad.variance[p, 0].sqrt():.3f}"
        )
    gaps = ig.completeness(path)
    print(
        f"completeness: max |mean gap| {gaps.mean_gap.abs().max():.1e}, "
        f"max |variance gap| {gaps.variance_gap.abs().max():.1e}"
    )

    import matplotlib

    matplotlib.use("Agg")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    ax = plot_attribution_path(ig, path[-1], num=60, feature_names=["x1", "x2"])
    ax.set_title("IG attributions along the path 0 → (6, 6), ±2σ")
    ax.figure.tight_layout()
    ax.figure.savefig(args.out_dir / "attribution_path.png", dpi=120)
    ax = plot_attribution_bars(attr, path.size(0) - 1, ["x1", "x2"])
    ax.set_title("attributions at (6, 6), ±2σ")
    ax.figure.tight_layout()
    ax.figure.savefig(args.out_dir / "attribution_bars.png", dpi=120)
    print(f"figures written to {args.out_dir}/attribution_path.png and attribution_bars.png")


if __name__ == "__main__":
    main()
