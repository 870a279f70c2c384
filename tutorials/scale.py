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
# # GPX at scale: lean kernels, inducing points and KISS-GP grids
#
# `GPXModel` keeps its marginal covariance $\mathbf C = \sigma_y^2 \mathbf I + (\mathbf K + \sigma_w^2\mathbf I)
# \odot \mathbf Z \mathbf Z^\top$ lazy around the base kernel's own operator, so the base kernel decides how it
# scales. Three ways past the dense limit (5,000 rows):
#
# * **lean** (`PartitionedKernel(base)`): any kernel, with $\mathbf K$ never stored; products run over row blocks
#   and the solves use GPyTorch's conjugate gradients. Memory $O(n)$, but CG is slow when the noise is small.
# * **inducing points** (`InducingPointKernel`, GPyTorch's SGPR kernel): $\mathbf K \approx \boldsymbol\Phi
#   \boldsymbol\Phi^\top$ with $M$ inducing points, so $\mathbf C$ is solved exactly by Woodbury in
#   $O(n d^2 M^2)$, and each point's weight posterior costs $O(d^2 M^2)$, independent of $n$.
# * **KISS-GP grids** (`GridInterpolationKernel`, low-dimensional $\mathbf x$): the grid's Kronecker
#   eigenpairs give $\mathbf K = \boldsymbol\Phi \boldsymbol\Phi^\top$ of width $r$ (the grid root's rank),
#   and from there it is the Woodbury path of the inducing points.
#
# The data here are synthetic draws with known local weights, $y = w_1(\mathbf x) x_1 + w_2(\mathbf x) x_2 +
# \varepsilon$ with $w_1 = \sin(2 x_1)$ and $w_2 = \cos(x_2) + 0.5$, so the recovered weights can be checked.
# The small mode (`GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1`) uses 1,500 rows; the full mode 100,000 rows
# (`GPYTORCH_EXPLAIN_TUTORIAL_ROWS` overrides both). For 412,000 real rows, see `explain_400k_rows.py`.
# Figures go to `GPYTORCH_EXPLAIN_TUTORIAL_OUT` (default `tutorials/_output/`).

# %%
import os
import pathlib
import sys
import time

import gpytorch
import matplotlib
import torch
from gpytorch.kernels import GridInterpolationKernel, InducingPointKernel, RBFKernel, ScaleKernel

import gpytorch_explain
from gpytorch_explain import GPXModel
from gpytorch_explain.kernels import PartitionedKernel

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # a script never opens a window
import matplotlib.pyplot as plt  # noqa: E402

SMALL = os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_SMALL", "") not in ("", "0")
N = int(os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_ROWS", 1_500 if SMALL else 100_000))
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
# ## Synthetic data with known local weights

# %%
torch.manual_seed(0)


def true_weights(x):
    return torch.stack([torch.sin(2 * x[:, 0]), torch.cos(x[:, 1]) + 0.5], dim=-1)


def draw(n):
    x = torch.rand(n, 2, dtype=torch.float64) * 4 - 2
    y = (true_weights(x) * x).sum(-1) + 0.1 * torch.randn(n, dtype=torch.float64)
    return x, y


x, y = draw(N)
x_test, y_test = draw(200)
NAMES = ["x1", "x2"]
N_SUBSET = min(N, 300 if SMALL else 2_000)
subset = torch.randperm(N)[:N_SUBSET]
print(f"{N:,} training rows, {len(x_test)} test rows, 2 features (z = x)")


def report(name, model, start, num_points=200):
    """Test RMSE of the prediction and of the weights against the truth; returns the explanation.

    The time is from ``start`` (before the model was built) to the end of the test points' explanations.
    """
    xt, yt = x_test[:num_points], y_test[:num_points]
    with torch.no_grad():
        explanation = model.explain(xt)
    seconds = time.perf_counter() - start
    rmse = (explanation.prediction_mean - yt).pow(2).mean().sqrt().item()
    w_err = (explanation.weights_mean - true_weights(xt)).pow(2).mean().sqrt().item()
    inside = ((explanation.weights_mean - true_weights(xt)).abs() <= explanation.weights_std).double().mean()
    print(
        f"{name:<16} {seconds:6.1f} s   {num_points} test points: RMSE {rmse:.3f}   weight RMSE {w_err:.3f}   "
        f"true weight within ±1 posterior std: {inside:.2f}"
    )
    return explanation


results = {}

# %% [markdown]
# ## Hyperparameters on a subset
#
# Hyperparameters are well determined by a few thousand rows. As docs/scale.md recommends, they are fitted by the
# exact GPX likelihood on a subset (here 300 rows in the small mode and 2,000 in the full mode; one
# Cholesky), and every scalable model below reuses them:
# the base kernel module is shared, and $\sigma_w^2$ is copied.

# %%
likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
rbf = ScaleKernel(RBFKernel(ard_num_dims=2)).double()
t0 = time.perf_counter()
exact = GPXModel(x[subset], y[subset], likelihood=likelihood, base_kernel=rbf, feature_names=NAMES)
exact.fit(max_iter=15 if SMALL else 100)
results["exact (subset)"] = report(f"exact, {N_SUBSET:,} rows", exact, t0)
weight_noise = exact.weight_noise.detach()

# %% [markdown]
# ## Inducing points: exact Woodbury solves in inducing space
#
# `InducingPointKernel` around the same fitted kernel, with $M$ inducing points at random rows. Conditioning on
# all $n$ rows is one pass over them, forming a $dM \times dM$ capacitance matrix.

# %%
M = 32 if SMALL else 128
inducing = InducingPointKernel(rbf, inducing_points=x[torch.randperm(N)[:M]].clone(), likelihood=likelihood)
t0 = time.perf_counter()
sgpr = GPXModel(x, y, likelihood=likelihood, base_kernel=inducing, feature_names=NAMES)
sgpr.weight_noise = weight_noise
sgpr.eval()
with gpytorch_explain.settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0):
    results["inducing"] = report(f"inducing, M={M}", sgpr, t0)

# %% [markdown]
# ## KISS-GP: a grid on two dimensions
#
# A `GridInterpolationKernel` with the fitted RBF on a $40 \times 40$ grid. GPX takes the grid root's eigenpairs
# (the ones above `gpytorch_explain.settings.grid_root_tolerance`) as features, so the solves are Woodbury
# solves again.

# %%
grid = ScaleKernel(GridInterpolationKernel(RBFKernel(ard_num_dims=2), grid_size=40, num_dims=2)).double()
grid.outputscale = rbf.outputscale.detach()
grid.base_kernel.base_kernel.lengthscale = rbf.base_kernel.lengthscale.detach()
t0 = time.perf_counter()
ski = GPXModel(x, y, likelihood=likelihood, base_kernel=grid, feature_names=NAMES)
ski.weight_noise = weight_noise
ski.eval()
with gpytorch_explain.settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0):
    results["grid"] = report("KISS-GP 40x40", ski, t0)

# %% [markdown]
# ## Lean: any kernel, never stored
#
# `PartitionedKernel(rbf)` represents the same matrix as `rbf`; with GPyTorch's Cholesky limit set to 0 it is
# never densified, and GPX uses CG with tight tolerances. On a CPU this path is the slowest of the three at
# large $n$ (the noise is small, so CG needs many iterations), so here it runs on 400 rows in the small
# mode and 3,000 in the full mode. Exact weight stds need
# $d \cdot m$ CG right-hand sides for $m$ test points, so only 10 test points are explained.

# %%
n_lean = min(N, 400 if SMALL else 3_000)
t0 = time.perf_counter()
lean = GPXModel(x[:n_lean], y[:n_lean], likelihood=likelihood, base_kernel=PartitionedKernel(rbf), feature_names=NAMES)
lean.weight_noise = weight_noise
lean.eval()
with gpytorch_explain.settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0):
    results["lean"] = report(f"lean, {n_lean:,} rows", lean, t0, num_points=10)

# %% [markdown]
# ## The same explanation from every path
#
# One test point's contributions, with $\pm 1$ posterior std error bars (latent), from each model
# (`GPXExplanation.plot`). The paths agree up to their approximations; the ones conditioned on more rows are
# more certain.

# %%
fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 2.8), sharex=True)
for ax, (name, explanation) in zip(axes, results.items(), strict=True):
    explanation.plot(0, ax=ax)
    ax.set_title(f"{name}\n" + ax.get_title().split("\n")[0].replace("sample 0: ", ""), fontsize=8)
    ax.xaxis.label.set_fontsize(7)
save(fig, "scale_contributions.png")

# %% [markdown]
# The recovered weight $w_1(\mathbf x)$ along $x_1$ (at $x_2 \approx 0$) from the inducing-point model, with its
# $\pm 1$ posterior std band, against the truth $\sin(2 x_1)$:

# %%
line = torch.stack([torch.linspace(-2, 2, 100, dtype=torch.float64), torch.zeros(100, dtype=torch.float64)], -1)
with torch.no_grad(), gpytorch_explain.settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0):
    weights = sgpr.predict_weights(line)
mean, std = weights.mean[:, 0], weights.variance[:, 0].sqrt()
fig, ax = plt.subplots(figsize=(5.5, 3.2))
ax.plot(line[:, 0], torch.sin(2 * line[:, 0]), "k--", label="true w1")
ax.plot(line[:, 0], mean, label=f"GPX, inducing points (n = {N:,})")
ax.fill_between(line[:, 0], mean - std, mean + std, alpha=0.3, label="±1 posterior std")
ax.set_xlabel("x1 (x2 = 0)")
ax.set_ylabel("local weight w1")
ax.legend(fontsize=8)
save(fig, "scale_weight_curve.png")
