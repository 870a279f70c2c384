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
# # Evaluating explanations: faithfulness, sufficiency, stability, inconsistency
#
# `gpytorch_explain.metrics` holds the explanation-quality metrics of the GPX and BO-LIME papers as plain
# functions on arrays or tensors, and `gpytorch_explain.explainers` puts GPX, the attribution GPs, linear
# models and (optionally) LIME, KernelSHAP and Captum behind one `explain(x)` interface. This tutorial scores
# three explainers of scikit-learn's bundled diabetes data:
#
# * **GPX**: the contributions $\mathbf w_* \odot \mathbf z_*$ of a `GPXModel`;
# * **IG**: the exact integrated-gradient posterior of a standard GPyTorch GP regression;
# * **linear**: a global ridge regression, $w_j (x_j - \bar x_j)$;
#
# with
#
# * `faithfulness`: per sample, the Pearson correlation over features between each contribution and the drop
#   in prediction when that feature is set to the baseline (higher is better);
# * `sufficiency`: $|f(\mathbf x) - f(\mathbf x^{[k]})|$ when only the $k$ most important features are kept
#   (lower is better);
# * `stability`: the local Lipschitz estimate of the weights, GPX paper eq. (19) (lower is better);
# * `inconsistency`: the spread of repeated explanations of the same sample (lower is better), here over
#   posterior draws of the contributions, which shows how much of the ranking the uncertainty leaves open.
#
# Finally `plot_summary` shows the contributions over many samples with their $\pm 1$ std.
# `GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1` uses fewer training rows; figures go to `GPYTORCH_EXPLAIN_TUTORIAL_OUT`
# (default `tutorials/_output/`).

# %%
import os
import pathlib
import sys

import gpytorch
import matplotlib
import numpy as np
import torch
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from gpytorch_explain import GPXModel, metrics
from gpytorch_explain.explainers import GPXExplainer, IGExplainer, LinearExplainer, plot_summary

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
# ## Data and models
#
# Features and target are standardised with the training statistics, so the baseline of every removal metric
# (the training mean) is $\mathbf 0$.

# %%
torch.manual_seed(0)
data = load_diabetes()
names = data.feature_names
x_tr, x_te, y_tr, y_te = train_test_split(data.data, data.target, test_size=0.2, random_state=0)
if SMALL:
    x_tr, y_tr, x_te = x_tr[:150], y_tr[:150], x_te[:60]
xs, ys = StandardScaler().fit(x_tr), StandardScaler().fit(y_tr[:, None])
x_tr = torch.as_tensor(xs.transform(x_tr), dtype=torch.float64)
x_te = torch.as_tensor(xs.transform(x_te), dtype=torch.float64)
y_tr = torch.as_tensor(ys.transform(y_tr[:, None])[:, 0], dtype=torch.float64)
print(f"{len(x_tr)} training rows, {len(x_te)} explained test rows, {x_tr.shape[1]} features")

gpx = GPXModel(x_tr, y_tr, feature_names=names).fit(max_iter=30 if SMALL else None)


class GPR(gpytorch.models.ExactGP):
    def __init__(self, x, y):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=x.size(-1)))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


gpr = GPR(x_tr, y_tr).double()
gpr.train()
mll = gpytorch.mlls.ExactMarginalLogLikelihood(gpr.likelihood, gpr)
opt = torch.optim.LBFGS(gpr.parameters(), max_iter=30 if SMALL else 100, line_search_fn="strong_wolfe")


def closure():
    opt.zero_grad()
    loss = -mll(gpr(x_tr), y_tr)
    loss.backward()
    return loss


opt.step(closure)
gpr.eval()
ridge = Ridge(alpha=1.0).fit(x_tr.numpy(), y_tr.numpy())

# %% [markdown]
# Each explainer comes with the prediction function it explains (the metrics call it on perturbed inputs):
# GPX's latent mean $\mathbf z^\top \mathbb E[\mathbf w]$, the GPR's posterior mean, and the ridge model.


# %%
def gpx_predict(x):
    with torch.no_grad():
        return gpx(torch.as_tensor(x, dtype=torch.float64)).mean


def gpr_predict(x):
    with torch.no_grad():
        return gpr(torch.as_tensor(x, dtype=torch.float64)).mean


def ridge_predict(x):
    return ridge.predict(np.asarray(x))


baseline = torch.zeros(x_tr.shape[1], dtype=torch.float64)
explainers = {
    "GPX": (GPXExplainer(gpx), gpx_predict),
    "IG (GPR)": (IGExplainer(gpr, baseline=baseline), gpr_predict),
    "linear (ridge)": (LinearExplainer(ridge, name="ridge"), ridge_predict),
}
with torch.no_grad():
    outputs = {name: explainer.explain(x_te) for name, (explainer, _) in explainers.items()}

# %% [markdown]
# IG is complete: its contributions add up to $f(\mathbf x) - f(\mathbf b)$. `metrics.completeness_gap` checks
# that for the posterior means:

# %%
ig_gap = metrics.completeness_gap(
    outputs["IG (GPR)"].contributions, gpr_predict(x_te), gpr_predict(baseline.unsqueeze(0))
)
print(f"IG completeness gap: max |gap| = {np.abs(ig_gap).max():.1e}")

# %% [markdown]
# ## The metrics
#
# Faithfulness and sufficiency remove features by setting them to the baseline $\mathbf 0$ (the training
# mean). Stability compares the *weights* of neighbouring test samples (`eps` is the neighbourhood radius in
# standardised units, divided by the dimension); a sample with no neighbour within `eps` has no score, and how
# many have one is printed (with few test samples in several dimensions, few do at small `eps`). Inconsistency
# is computed over 20 draws from each
# contribution's posterior, $\mathcal N(\text{mean}, \text{std}^2)$ per feature (0 for the ridge model, which
# has no posterior).

# %%
EPS = 0.2
ks = list(range(1, 6))
rng = np.random.default_rng(0)
scores = {}
for name, (_, predict) in explainers.items():
    out = outputs[name]
    faith = metrics.faithfulness(predict, x_te.numpy(), out.contributions, baseline=baseline.numpy())
    suff = metrics.sufficiency(predict, x_te.numpy(), out.contributions, baseline=baseline.numpy(), k=ks)
    # per sample: samples without a neighbour within eps are nan (the mean warns and counts them)
    stab = metrics.stability(x_te.numpy(), out.weights, eps=EPS, reduction="none")
    std = out.std if out.std is not None else np.zeros_like(out.contributions)
    draws = out.contributions + std * rng.standard_normal((20, *out.contributions.shape))
    scores[name] = {
        "faithfulness": float(np.nanmean(faith)),
        "sufficiency": suff.mean(1),
        "stability": float(np.nanmean(stab)) if np.isfinite(stab).any() else float("nan"),
        "with_neighbour": int(np.isfinite(stab).sum()),
        "inconsistency": metrics.inconsistency(draws),
    }
print(f"{'explainer':<16}{'faithfulness':>14}{'suff@1':>9}{'suff@3':>9}{'stability':>11}{'inconsistency':>15}")
for name, s in scores.items():
    print(
        f"{name:<16}{s['faithfulness']:>14.3f}{s['sufficiency'][0]:>9.3f}{s['sufficiency'][2]:>9.3f}"
        f"{s['stability']:>11.3f}{s['inconsistency']:>15.3f}"
    )
n_nb = scores[next(iter(scores))]["with_neighbour"]
print(f"stability: mean over the {n_nb} of {len(x_te)} test samples with a neighbour within eps = {EPS}")

# %% [markdown]
# Sufficiency as a function of $k$ (GPX paper, Figure 2): the mean $|f(\mathbf x) - f(\mathbf x^{[k]})|$ over
# the explained samples, with error bars of $\pm 1$ std over samples.

# %%
fig, ax = plt.subplots(figsize=(5.5, 3.5))
for name, (_, predict) in explainers.items():
    suff = metrics.sufficiency(predict, x_te.numpy(), outputs[name].contributions, baseline=baseline.numpy(), k=ks)
    ax.errorbar(ks, suff.mean(1), yerr=suff.std(1), marker="o", capsize=3, label=name)
ax.set_xlabel("k (features kept)")
ax.set_ylabel("sufficiency (error bars: ±1 std over samples)")
ax.legend()
save(fig, "sufficiency.png")

# %% [markdown]
# ## A summary plot over many samples
#
# `plot_summary` draws one row per feature (sorted by mean $|\phi|$), one dot per sample coloured by the
# feature's value, and each dot's $\pm 1$ posterior std as a thin bar.

# %%
ax = plot_summary(outputs["GPX"], x=x_te.numpy(), feature_names=names)
ax.set_title("GPX contributions over the test samples (error bars: ±1 posterior std)", fontsize=9)
save(ax.figure, "summary_gpx.png")

ax = plot_summary(outputs["IG (GPR)"], feature_names=names, kind="box")
ax.set_title("IG of the GPR over the test samples (box; red: mean with ±1 std)", fontsize=9)
save(ax.figure, "summary_ig_box.png")
