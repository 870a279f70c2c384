#!/usr/bin/env python3
"""GPX on scikit-learn's diabetes data: accuracy next to a standard GP, and one explained prediction.

Run from the repository root with ``bash scripts/demo.sh`` (sets up its environment), or
``python tutorials/demo_diabetes.py [--out FILE] [--sample I]`` in an environment that has
gpytorch-explain with its ``demo`` extra.
"""

from __future__ import annotations

import argparse
import time

import gpytorch
import numpy as np
import torch
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from gpytorch_explain import GPXModel, median_heuristic_lengthscale


class StandardGPR(gpytorch.models.ExactGP):
    """Plain GP regression with the same kernel and initialisation as GPX's default."""

    def __init__(self, x, y):
        likelihood = gpytorch.likelihoods.GaussianLikelihood()
        likelihood.noise = 0.01
        super().__init__(x, y, likelihood)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
        self.covar_module.outputscale = 1.0
        self.covar_module.base_kernel.lengthscale = median_heuristic_lengthscale(x)
        self.to(x.dtype)

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def fit_lbfgs(model, max_iter=100):
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=max_iter, line_search_fn="strong_wolfe", tolerance_change=1e-5)

    def closure():
        opt.zero_grad()
        loss = -mll(model(*model.train_inputs), model.train_targets)
        loss.backward()
        return loss

    opt.step(closure)
    return model.eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="gpx_demo_explanation.png", help="where to write the bar chart")
    parser.add_argument("--sample", type=int, default=0, help="which test sample to explain")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    data = load_diabetes()
    x, y = data.data, data.target
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=args.seed)
    xs, ys = StandardScaler().fit(x_tr), StandardScaler().fit(y_tr[:, None])
    to_t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    x_tr, x_te = to_t(xs.transform(x_tr)), to_t(xs.transform(x_te))
    y_tr, y_te = to_t(ys.transform(y_tr[:, None])[:, 0]), to_t(ys.transform(y_te[:, None])[:, 0])
    print(f"diabetes: {len(x_tr)} training and {len(x_te)} test samples, {x.shape[1]} features (standardised)")

    t0 = time.perf_counter()
    gpx = GPXModel(x_tr, y_tr, feature_names=data.feature_names).fit()
    t_gpx = time.perf_counter() - t0
    t0 = time.perf_counter()
    gpr = fit_lbfgs(StandardGPR(x_tr, y_tr))
    t_gpr = time.perf_counter() - t0

    with torch.no_grad():
        mse_gpx = torch.mean((gpx.likelihood(gpx(x_te)).mean - y_te) ** 2).item()
        mse_gpr = torch.mean((gpr.likelihood(gpr(x_te)).mean - y_te) ** 2).item()
        explanation = gpx.explain(x_te)
    print(f"test MSE (standardised y): GPX {mse_gpx:.4f}  |  standard GPR {mse_gpr:.4f}")
    print(f"fit time: GPX {t_gpx:.1f} s, GPR {t_gpr:.1f} s")
    print(
        f"GPX hyperparameters: sigma_w^2 = {gpx.weight_noise.item():.3g}, sigma_y^2 = {gpx.likelihood.noise.item():.3g}"
    )

    i = args.sample
    print(f"\nExplanation of test sample {i} (true y = {y_te[i].item():+.4f}); contribution = weight x feature.")
    print("Every ± is ±1 posterior std: 'latent' for f and the contributions, 'predictive' for y (adds the noise).")
    print(explanation.summary(i))
    latent = gpx(x_te[i : i + 1])
    gap = (explanation.contributions_mean[i].sum() - latent.mean[0]).abs().item()
    print(f"(contributions sum to the latent mean f up to {gap:.1e}; their covariance sums to Var f)")

    import matplotlib

    matplotlib.use("Agg")
    ax = explanation.plot(i, top_k=None)
    ax.figure.savefig(args.out, dpi=120)
    print(f"\nbar chart written to {args.out}: error bars ±1 posterior std (latent); title: {ax.get_title()!r}")
    return explanation


if __name__ == "__main__":
    np.set_printoptions(precision=4, suppress=True)
    main()
