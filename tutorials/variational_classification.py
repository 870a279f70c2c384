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
# # Variational GPX and classification attributions
#
# `VariationalGPXModel` is GPX on inducing points, trained by minibatch ELBO. It works with any single-output
# likelihood, so GPX *classification* (with GPyTorch's `BernoulliLikelihood`) works too:
#
# $$
# p(y_i = 1) = \Phi(f_i), \qquad f_i = \mathbf w_i^\top \mathbf z_i, \qquad
# \mathbf w_i = \mathbf g(\mathbf x_i) + \boldsymbol\varepsilon_w .
# $$
#
# On images, the local weights $\mathbf w_i$ are a *weight map*: which pixels push this image towards one
# class or the other. This tutorial
#
# 1. fits a GPX classifier on scikit-learn's bundled digits (3 against 8, 8 × 8 pixels) and draws the weight
#    maps of a few test images with their $\pm 1$ posterior std;
# 2. attributes the *class probability* of a standard GPyTorch variational classifier (an SVGP) with the
#    expected gradient and integrated gradients of $p(y = 1 \mid \mathbf x)$, with posterior std and credible
#    intervals from joint draws of the latent and its gradient.
#
# `GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1` trains briefly with few inducing points; figures go to
# `GPYTORCH_EXPLAIN_TUTORIAL_OUT` (default `tutorials/_output/`).

# %%
import os
import pathlib
import sys

import gpytorch
import matplotlib
import numpy as np
import torch
from sklearn.datasets import load_digits

from gpytorch_explain import VariationalGPXModel
from gpytorch_explain.attribution import expected_probability_ig, probability_ig_distribution
from gpytorch_explain.explainers import plot_weight_maps

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # a script never opens a window
import matplotlib.pyplot as plt  # noqa: E402

SMALL = os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_SMALL", "") not in ("", "0")
_default_out = "_output" if pathlib.Path.cwd().name == "tutorials" else "tutorials/_output"
OUT = pathlib.Path(os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_OUT", _default_out))
OUT.mkdir(parents=True, exist_ok=True)


def save(fig, name):
    """Write a figure; show it when running as a notebook (inline backend), otherwise close it."""
    fig.savefig(OUT / name, dpi=120, bbox_inches="tight")
    print(f"wrote {OUT / name}")
    if "inline" in matplotlib.get_backend():
        plt.show()
    else:
        plt.close(fig)


# %% [markdown]
# ## Data: digits 3 and 8
#
# Pixel intensities (0 to 16) are divided by 16, so that every feature lies in $[0, 1]$. The label is 1 for an
# 8. The explanation features are the pixels themselves ($\mathbf z = \mathbf x$), so a weight map multiplied
# by the image gives each pixel's contribution to the latent $f$.

# %%
torch.manual_seed(0)
digits = load_digits()
keep = (digits.target == 3) | (digits.target == 8)
X = torch.as_tensor(digits.data[keep] / 16.0, dtype=torch.float64)
Y = torch.as_tensor((digits.target[keep] == 8).astype(np.float64))
perm = torch.randperm(len(X))
X, Y = X[perm], Y[perm]
n_train = 250
x_train, y_train, x_test, y_test = X[:n_train], Y[:n_train], X[n_train:], Y[n_train:]
print(f"digits 3 vs 8: {n_train} training and {len(x_test)} test images, {X.shape[1]} pixels")

# %% [markdown]
# ## GPX classification with `VariationalGPXModel`
#
# `VariationalGPXModel(inducing_points, likelihood=BernoulliLikelihood())` places $M$ inducing points per
# weight GP; with 64 weights, the `"independent"` variational distribution (one $M \times M$ block per weight)
# keeps training cheap. `fit` runs Adam on the GPX ELBO over minibatches.

# %%
num_inducing = 8 if SMALL else 24
gpx = VariationalGPXModel(
    x_train[torch.randperm(n_train)[:num_inducing]].clone(),
    likelihood=gpytorch.likelihoods.BernoulliLikelihood(),
    variational_distribution="independent",
    feature_names=[f"px{r}{c}" for r in range(8) for c in range(8)],
)
n_fit = 150 if SMALL else n_train  # small mode: fewer images and steps
gpx.fit(x_train[:n_fit], y_train[:n_fit], num_epochs=8 if SMALL else 60, lr=0.1 if SMALL else 0.05, batch_size=150)
with torch.no_grad():
    p_test = gpx.likelihood(gpx(x_test)).mean
gpx_accuracy = ((p_test > 0.5).double() == y_test).double().mean().item()
print(f"GPX classifier: test accuracy {gpx_accuracy:.3f}; final negative ELBO per image {gpx.fit_history[-1]:.3f}")

# %% [markdown]
# ## Digit weight maps
#
# `explain` returns a `GPXExplanation`: for each image the posterior mean and std of the 64 local weights, and
# the contributions (weight × pixel). `plot_weight_maps` draws, for each image, the input, the weight map
# (red pushes towards "8", blue towards "3"; colour scale symmetric about 0 and shared) and the weights'
# $\pm 1$ posterior std.

# %%
show = torch.cat([torch.nonzero(y_test == 0)[:3, 0], torch.nonzero(y_test == 1)[:3, 0]])
with torch.no_grad():
    explanation = gpx.explain(x_test[show])
titles = [f"{'8' if y_test[i] else '3'}: p(8) = {p_test[i]:.2f}" for i in show.tolist()]
fig = plot_weight_maps(
    explanation.weights_mean, image_shape=(8, 8), std=explanation.weights_std, images=x_test[show], titles=titles
)
fig.suptitle("GPX local weights on digits (3 vs 8); bottom row: ±1 posterior std of the weights", fontsize=9)
save(fig, "digits_weight_maps.png")
print(explanation.summary(0, top_k=5))

# %% [markdown]
# ## Attributing the class probability of a standard variational GP classifier
#
# For any GPyTorch `ApproximateGP` with a `VariationalStrategy` (here an SVGP with an ARD RBF kernel and a
# `BernoulliLikelihood`), the probability $p(y = 1 \mid \mathbf x) = \Phi(f(\mathbf x))$ is a nonlinear function
# of the latent, so its attributions are not Gaussian. `expected_probability_ig` gives the mean of the
# integrated gradients of $p$ (closed form in the latent for the probit link, Gauss–Legendre along the path),
# and `probability_ig_distribution` draws the latent and its gradient jointly along the path, which gives
# the std and a credible interval. Both are complete: the attributions add up to $p(\mathbf x) - p(\mathbf b)$.


# %%
class SVGP(gpytorch.models.ApproximateGP):
    def __init__(self, inducing):
        dist = gpytorch.variational.CholeskyVariationalDistribution(inducing.size(0))
        strategy = gpytorch.variational.VariationalStrategy(self, inducing, dist, learn_inducing_locations=True)
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=inducing.size(-1)))
        self.covar_module.base_kernel.lengthscale = 2.0

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


svgp = SVGP(x_train[: 16 if SMALL else 32].clone()).double()
likelihood = gpytorch.likelihoods.BernoulliLikelihood()
svgp.train()
mll = gpytorch.mlls.VariationalELBO(likelihood, svgp, num_data=n_fit)
opt = torch.optim.Adam(svgp.parameters(), lr=0.1 if SMALL else 0.05)
for _ in range(25 if SMALL else 300):
    opt.zero_grad()
    loss = -mll(svgp(x_train[:n_fit]), y_train[:n_fit])
    loss.backward()
    opt.step()
svgp.eval()
with torch.no_grad():
    svgp_accuracy = ((likelihood(svgp(x_test)).mean > 0.5).double() == y_test).double().mean().item()
print(f"SVGP classifier: test accuracy {svgp_accuracy:.3f}")

# %% [markdown]
# The baseline is a blank image ($\mathbf b = \mathbf 0$). The expected IG of the probability of "8", drawn as
# maps like the GPX weights above:

# %%
baseline = torch.zeros(X.shape[1], dtype=torch.float64)
expected = expected_probability_ig(svgp, likelihood, x_test[show], baseline, path_order=16)
print(f"completeness of the expected IG: max |gap| {expected.completeness_gap.abs().max():.1e}")
fig = plot_weight_maps(expected.mean, image_shape=(8, 8), images=x_test[show], titles=titles)
fig.suptitle("SVGP: expected integrated gradients of p(8) (baseline: blank image)", fontsize=9)
save(fig, "digits_probability_ig_maps.png")

# %% [markdown]
# For one image, the distribution of the IG of $p(8)$ from joint posterior draws: bars are the mean over
# draws with $\pm 1$ std error bars (the 10 largest pixels), and the text gives the 90% credible intervals.
# Each draw's attributions add up to its $p(\mathbf x) - p(\mathbf b)$ up to the Gauss–Legendre error along the
# path (`path_order` nodes), which the last line reports; raise `path_order` if it is not small against the
# attributions.

# %%
dist = probability_ig_distribution(
    svgp,
    likelihood,
    x_test[show[-1:]],
    baseline,
    num_samples=64 if SMALL else 512,
    path_order=12 if SMALL else 32,
    generator=torch.Generator().manual_seed(0),
)
mean, std, lower, upper = dist.mean[0], dist.std[0], dist.lower[0], dist.upper[0]
top = torch.argsort(mean.abs(), descending=True)[:10].flip(0)
fig, ax = plt.subplots(figsize=(6, 4))
colors = ["tab:red" if v > 0 else "tab:blue" for v in mean[top]]
ax.barh(range(len(top)), mean[top], xerr=std[top], capsize=3, color=colors)
ax.set_yticks(range(len(top)))
ax.set_yticklabels([f"pixel ({j // 8}, {j % 8})" for j in top.tolist()])
ax.axvline(0.0, color="black", linewidth=0.8)
ax.set_xlabel("IG of p(8) (error bars: ±1 posterior std over joint draws)")
ax.set_title(titles[-1], fontsize=9)
save(fig, "digit_probability_ig_bars.png")
for j in top.flip(0)[:5].tolist():
    print(
        f"pixel ({j // 8}, {j % 8}): IG of p(8) {mean[j]:+.4f} ± {std[j]:.4f} (±1 std), "
        f"{int(100 * dist.level)}% interval [{lower[j]:+.4f}, {upper[j]:+.4f}]"
    )
print(f"largest completeness gap over the draws: {dist.completeness_gap.abs().max():.1e}")
