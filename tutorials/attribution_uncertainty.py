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
# # Attribution GPs for an existing GPyTorch model
#
# The gradient $\nabla f(\mathbf x)$ and the integrated gradients (IG)
#
# $$
# \mathrm{IG}_i(\mathbf x) = (x_i - b_i) \int_0^1 \frac{\partial f}{\partial x_i}\big(\mathbf b + t(\mathbf x -
# \mathbf b)\big)\, dt
# $$
#
# of a GP are linear functionals of it, so under the posterior of a trained GP they are GPs too.
# `PosteriorGradient` and `PosteriorIntegratedGradients` compute their posterior exactly from any trained
# `ExactGP`, using the model's own caches. Nothing about the model has to change.
#
# This tutorial is a synthetic version of the first example of Seitz et al. (GP integrated-gradient
# attributions): $y = \sin(x_1) + 0.5\,x_2 + \varepsilon$ observed on $[0, 6]^2$, explained along the diagonal
# path from the baseline $\mathbf 0$ to $(6, 6)$. The attributions grow more uncertain away from the baseline.
# Every error bar and band is $\pm 1$ posterior std of the latent function's attribution.
#
# `GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1` fits on fewer points; figures go to `GPYTORCH_EXPLAIN_TUTORIAL_OUT`
# (default `tutorials/_output/`).

# %%
import os
import pathlib
import sys

import gpytorch
import matplotlib
import torch

from gpytorch_explain import PosteriorGradient, PosteriorIntegratedGradients
from gpytorch_explain.attribution import plot_attribution_bars, plot_attribution_path

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
# ## A GP regression model, trained the usual way
#
# Any `ExactGP` works; this one has a zero mean and an ARD RBF kernel (for which the attribution kernels are
# closed forms; other differentiable kernels use autograd and adaptive Gauss–Legendre quadrature).


# %%
class GPR(gpytorch.models.ExactGP):
    def __init__(self, x, y):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=2))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


torch.manual_seed(0)
n = 40 if SMALL else 200
x = torch.rand(n, 2, dtype=torch.float64) * 6
y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(n, dtype=torch.float64)
model = GPR(x, y).double()
model.train()
mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
opt = torch.optim.LBFGS(model.parameters(), max_iter=50 if SMALL else 100, line_search_fn="strong_wolfe")


def closure():
    opt.zero_grad()
    loss = -mll(model(x), y)
    loss.backward()
    return loss


opt.step(closure)
model.eval()
print(f"trained on {n} points; noise {model.likelihood.noise.item():.4f}")

# %% [markdown]
# ## Posterior gradient and integrated gradients, with standard deviations
#
# Both return a `MultitaskMultivariateNormal` over the points and features: `.mean` is `(m, D)`, `.variance`
# the per-feature variances, and the full joint covariance is available too. IG is *complete*: the
# attributions add up to $f(\mathbf x) - f(\mathbf b)$, in mean and in variance, which `ig.completeness`
# checks.

# %%
baseline = torch.zeros(2, dtype=torch.float64)
ig = PosteriorIntegratedGradients(model, baseline=baseline)
path = torch.linspace(0, 1, 5, dtype=torch.float64).unsqueeze(-1) * torch.tensor([6.0, 6.0], dtype=torch.float64)
with torch.no_grad():
    attr = ig(path)
    grad = PosteriorGradient(model)(path)
print("every ± is ±1 posterior std (latent)")
print("point        IG_1 (± std)        IG_2 (± std)        ∂f/∂x1 (± std)")
for p in range(path.size(0)):
    m, s = attr.mean[p], attr.variance[p].sqrt()
    print(
        f"({path[p, 0]:.1f}, {path[p, 1]:.1f})  {m[0]:+.3f} ± {s[0]:.3f}     {m[1]:+.3f} ± {s[1]:.3f}"
        f"     {grad.mean[p, 0]:+.3f} ± {grad.variance[p, 0].sqrt():.3f}"
    )
gaps = ig.completeness(path)
mean_gap = gaps.mean_gap.abs().max().item()
variance_gap = gaps.variance_gap.abs().max().item()
print(f"completeness: max |mean gap| {mean_gap:.1e}, max |variance gap| {variance_gap:.1e}")

# %% [markdown]
# ## Attribution along the path, with bands
#
# `plot_attribution_path` evaluates the IG posterior at $\mathbf b + t(\mathbf x - \mathbf b)$ for
# $t \in [0, 1]$. At the baseline the attributions are exactly zero and certain; the bands ($\pm 1$ posterior
# std) widen along the path.

# %%
ax = plot_attribution_path(ig, path[-1], num=40 if SMALL else 80, feature_names=["x1", "x2"])
ax.set_title("IG attributions along the path 0 → (6, 6) (bands: ±1 posterior std)")
save(ax.figure, "attribution_path.png")

# %% [markdown]
# ## Attributions of one point, with error bars
#
# `plot_attribution_bars` draws one point's attributions with $\pm 1$ posterior std error bars. For
# $\mathbf x = (6, 6)$ the truth is $\mathrm{IG}_1 = \sin 6 \approx -0.28$ and $\mathrm{IG}_2 = 3$ (the model's
# $f$ is additive to a good approximation, so its IG splits the same way).

# %%
ax = plot_attribution_bars(attr, path.size(0) - 1, ["x1", "x2"])
ax.set_title("IG attributions at (6, 6) (error bars: ±1 posterior std)")
save(ax.figure, "attribution_bars.png")

# %% [markdown]
# The posterior gradient at the same points, one panel per point of the path:

# %%
fig, axes = plt.subplots(1, 3, figsize=(12, 2.4))
for ax, p in zip(axes, (0, 2, 4), strict=True):
    plot_attribution_bars(grad, p, ["∂f/∂x1", "∂f/∂x2"], ax=ax)
    ax.set_title(f"gradient at ({path[p, 0]:.1f}, {path[p, 1]:.1f})", fontsize=9)
    ax.set_xlabel("gradient (error bars: ±1 posterior std)")
save(fig, "gradient_bars.png")
