# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # GPX as a drop-in GP regression model
#
# `GPXModel` is an `ExactGP` that predicts as well as a GP regression model and also explains every
# prediction. Each prediction is a local linear model whose weights are Gaussian processes,
#
# $$
# y_i = \mathbf w_i^\top \mathbf z_i + \varepsilon_y, \qquad
# \mathbf w_i = \mathbf g(\mathbf x_i) + \boldsymbol\varepsilon_w, \qquad g_l \sim \mathcal{GP}(0, k),
# $$
#
# so the posterior of the local weights $\mathbf w_*$, and of the contributions $\mathbf w_* \odot \mathbf z_*$
# (which add up to the prediction), are available in closed form.
#
# This tutorial fits GPX and a standard GPyTorch GP regression on scikit-learn's bundled diabetes data, compares
# their test errors, predicts $y$ with its standard deviation, and explains one test prediction: each feature's
# contribution with $\pm 1$ posterior std error bars.
#
# It is also the demo that `bash scripts/demo.sh` runs (that command writes `gpx_demo_explanation.png` into the
# repository's root folder, wherever it is run from). Settings come from environment variables, so the notebook
# runs under a kernel: `GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1` uses a subset of the data (fast), and
# `GPYTORCH_EXPLAIN_TUTORIAL_OUT` is where figures are written (default `tutorials/_output/`). Run as a script it
# also accepts `--out FILE`, `--sample I` and `--seed S`.

# %%
import argparse
import os
import pathlib
import sys
import time

import gpytorch
import matplotlib
import numpy as np
import torch
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from gpytorch_explain import GPXModel, median_heuristic_lengthscale

IN_NOTEBOOK = "ipykernel" in sys.modules
if not IN_NOTEBOOK:
    matplotlib.use("Agg")  # a script never opens a window
import matplotlib.pyplot as plt  # noqa: E402

SMALL = os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_SMALL", "") not in ("", "0")
_default_out = "_output" if pathlib.Path.cwd().name == "tutorials" else "tutorials/_output"
OUT = pathlib.Path(os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_OUT", _default_out))
OUT.mkdir(parents=True, exist_ok=True)

parser = argparse.ArgumentParser(description="GPX vs GP regression on diabetes data, one explained prediction.")
parser.add_argument("--out", default=str(OUT / "gpx_demo_explanation.png"), help="where to write the bar chart")
parser.add_argument("--sample", type=int, default=0, help="which test sample to explain")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args([] if IN_NOTEBOOK or __name__ != "__main__" else None)


def save(fig, path):
    """Write a figure; show it when running as a notebook (inline backend), otherwise close it."""
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"wrote {path}")
    if "inline" in matplotlib.get_backend():
        plt.show()
    else:
        plt.close(fig)


np.set_printoptions(precision=4, suppress=True)
torch.manual_seed(args.seed)

# %% [markdown]
# ## Data
#
# The ten diabetes features and the target are standardised with the training split's statistics (GPX's
# default prior assumes data near unit scale; `GPXModel(..., standardize_x=True, standardize_y=True)` would do
# this inside the model instead). In small mode only 150 training rows are used.

# %%
data = load_diabetes()
x, y = data.data, data.target
x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=args.seed)
if SMALL:
    x_tr, y_tr = x_tr[:150], y_tr[:150]
xs, ys = StandardScaler().fit(x_tr), StandardScaler().fit(y_tr[:, None])


def to_t(a):
    return torch.as_tensor(a, dtype=torch.float64)


x_tr, x_te = to_t(xs.transform(x_tr)), to_t(xs.transform(x_te))
y_tr, y_te = to_t(ys.transform(y_tr[:, None])[:, 0]), to_t(ys.transform(y_te[:, None])[:, 0])
print(f"diabetes: {len(x_tr)} training and {len(x_te)} test samples, {x.shape[1]} features (standardised)")

# %% [markdown]
# ## Fit GPX and a standard GP regression
#
# `GPXModel(train_x, train_y)` uses $\mathbf z = \mathbf x$ and a `ScaleKernel(RBFKernel())` with the
# median-heuristic lengthscale. `fit()` runs L-BFGS on the exact marginal likelihood. The standard GPR below
# uses the same kernel and initialisation and is trained with the usual GPyTorch loop.


# %%
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


t0 = time.perf_counter()
gpx = GPXModel(x_tr, y_tr, feature_names=data.feature_names).fit()
t_gpx = time.perf_counter() - t0
t0 = time.perf_counter()
gpr = fit_lbfgs(StandardGPR(x_tr, y_tr))
t_gpr = time.perf_counter() - t0

with torch.no_grad():
    mse_gpx = torch.mean((gpx.likelihood(gpx(x_te)).mean - y_te) ** 2).item()
    mse_gpr = torch.mean((gpr.likelihood(gpr(x_te)).mean - y_te) ** 2).item()
print(f"test MSE (standardised y): GPX {mse_gpx:.4f}  |  standard GPR {mse_gpr:.4f}")
print(f"fit time: GPX {t_gpx:.1f} s, GPR {t_gpr:.1f} s")
print(f"GPX hyperparameters: sigma_w^2 = {gpx.weight_noise.item():.3g}, sigma_y^2 = {gpx.likelihood.noise.item():.3g}")

# %% [markdown]
# ## Predictions of $y$ with their standard deviation
#
# `gpx(x)` is the latent $f_* = \mathbf w_*^\top \mathbf z_*$ (a `MultivariateNormal`), and
# `gpx.likelihood(gpx(x))` the predictive distribution of $y_*$, which adds the observation noise
# $\sigma_y^2$. The error bars are $\pm 1$ predictive std.

# %%
with torch.no_grad():
    predictive = gpx.likelihood(gpx(x_te))
    pred_mean, pred_std = predictive.mean, predictive.stddev
inside = ((y_te - pred_mean).abs() <= pred_std).double().mean().item()
print(f"share of test targets within ±1 predictive std: {inside:.2f} (a Gaussian would give 0.68)")

fig, ax = plt.subplots(figsize=(5, 4.5))
ax.errorbar(y_te.numpy(), pred_mean.numpy(), yerr=pred_std.numpy(), fmt="o", ms=3, alpha=0.6, capsize=2)
lims = [min(y_te.min().item(), pred_mean.min().item()) - 0.3, max(y_te.max().item(), pred_mean.max().item()) + 0.3]
ax.plot(lims, lims, color="black", linewidth=0.8)
ax.set_xlabel("true y (standardised)")
ax.set_ylabel("GPX prediction (error bars: ±1 predictive std)")
ax.set_title(f"GPX on diabetes: test MSE {mse_gpx:.3f}")
save(fig, OUT / "gpx_predictions.png")

# %% [markdown]
# ## One explained prediction
#
# `gpx.explain(x)` returns a `GPXExplanation` with the predictions, the local weights and the contributions
# $\mathbf w_* \odot \mathbf z_*$ (mean and std). The contributions add up to the latent mean exactly, and
# their covariance adds up to the latent variance. `GPXExplanation.plot` draws them as bars with
# $\pm 1$ posterior std error bars (latent, without the observation noise).

# %%
with torch.no_grad():
    explanation = gpx.explain(x_te)
i = args.sample
print(f"Explanation of test sample {i} (true y = {y_te[i].item():+.4f}); contribution = weight x feature.")
print("Every ± is ±1 posterior std: 'latent' for f and the contributions, 'predictive' for y (adds the noise).")
print(explanation.summary(i))
with torch.no_grad():
    latent = gpx(x_te[i : i + 1])
gap = (explanation.contributions_mean[i].sum() - latent.mean[0]).abs().item()
print(f"completeness gap |sum of contributions - latent mean| = {gap:.1e}")

ax = explanation.plot(i, top_k=None)
save(ax.figure, args.out)

# %% [markdown]
# The local *weights* themselves (the slope of the local linear model at this sample), with $\pm 1$ posterior
# std error bars:

# %%
ax = explanation.plot(i, top_k=None, kind="weights")
save(ax.figure, OUT / "gpx_weights.png")
