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
# # Black-box local explanations of a scikit-learn model
#
# `LocalGPExplainer` explains *any* model (scikit-learn models and pipelines, boosted trees, torch modules,
# plain functions) at one instance $\mathbf x$. It fits a GP surrogate to the model's outputs on samples near
# $\mathbf x$, chosen one batch at a time by Bayesian optimisation (BO-LIME, Saini & Prasad), and reports
#
# * the surrogate's ARD relevance $1/\ell_j$ (normalised to sum to 1; the BO-LIME score), from a refit with the
#   SAAS shrinkage prior, so features without a detectable effect get $\approx 0$;
# * the exact posterior of the signed local gradient $\partial f / \partial x_j$ at $\mathbf x$;
# * the exact posterior of the integrated gradients from a local baseline,
#
# each with a standard deviation, plus the surrogate's leave-one-out $R^2$ (its fidelity). The black box is
# called on exactly `budget` rows.
#
# Here a gradient-boosting regressor is trained on scikit-learn's bundled diabetes data and one test prediction
# is explained. A second explanation with another seed shows how stable the scores are.
# `GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1` uses 20 black-box calls instead of 50 (the older variable
# `GPYTORCH_EXPLAIN_QUICK=1` does the same); figures go to `GPYTORCH_EXPLAIN_TUTORIAL_OUT` (default
# `tutorials/_output/`).

# %%
import os
import pathlib
import sys
import time

import matplotlib
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.model_selection import train_test_split

from gpytorch_explain.local import LocalGPExplainer, from_sklearn_regressor

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # a script never opens a window
import matplotlib.pyplot as plt  # noqa: E402


def _flag(name):
    return os.environ.get(name, "") not in ("", "0")


SMALL = _flag("GPYTORCH_EXPLAIN_TUTORIAL_SMALL") or _flag("GPYTORCH_EXPLAIN_QUICK")
_default_out = "_output" if pathlib.Path.cwd().name == "tutorials" else "tutorials/_output"
OUT = pathlib.Path(os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_OUT", _default_out))
OUT.mkdir(parents=True, exist_ok=True)
BUDGET = 20 if SMALL else 50
SAMPLE = 0  # which test row to explain


def save(fig, name):
    """Write a figure; show it when running as a notebook (inline backend), otherwise close it."""
    fig.savefig(OUT / name, dpi=120, bbox_inches="tight")
    print(f"wrote {OUT / name}")
    if "inline" in matplotlib.get_backend():
        plt.show()
    else:
        plt.close(fig)


# %% [markdown]
# ## The black box
#
# Any scikit-learn regressor; `from_sklearn_regressor(model)` wraps its `predict` as a function of a 2-D
# array. (Classifiers are wrapped with `from_sklearn_classifier`, which explains one class's probability.)

# %%
data = load_diabetes()
X_train, X_test, y_train, y_test = train_test_split(data.data, data.target, test_size=0.2, random_state=0)
model = GradientBoostingRegressor(random_state=0).fit(X_train, y_train)
print(f"black box: GradientBoostingRegressor, test R² = {model.score(X_test, y_test):.3f}")

# %% [markdown]
# ## One local explanation
#
# Samples stay inside $\mathbf x \pm$ `interval` $\cdot\,\sigma$ ($\sigma$: each feature's std in the training
# data). `acquisition="gradient"` samples where the gradient at $\mathbf x$ is most uncertain, which gives
# stable gradient explanations for few calls.

# %%
x = X_test[SAMPLE]
explainer = LocalGPExplainer(
    from_sklearn_regressor(model),
    X_train,
    acquisition="gradient",
    budget=BUDGET,
    feature_names=data.feature_names,
    seed=0,
)
t0 = time.perf_counter()
result = explainer.explain(x)
seconds = time.perf_counter() - t0
print(f"explained in {seconds:.1f} s with {len(result.y_samples)} black-box calls")
print(result.summary())

# %% [markdown]
# `LocalExplanation.plot` draws the relevance, the gradient and the integrated gradients side by side; error
# bars are $\pm 1$ posterior std of the surrogate.

# %%
axes = result.plot()
save(axes[0].figure, "local_explain_sklearn.png")

# %% [markdown]
# ## How stable is it?
#
# The same explanation with another seed: different samples, and (ideally) similar scores. The gradient's
# posterior std says how far the two may differ.

# %%
again = LocalGPExplainer(
    from_sklearn_regressor(model),
    X_train,
    acquisition="gradient",
    budget=BUDGET,
    feature_names=data.feature_names,
    seed=1,
).explain(x)


def top3(r):
    return [r.feature_names[j] for j in np.argsort(-r.relevance)[:3]]


print(f"top-3 by relevance, seed 0: {top3(result)}; seed 1: {top3(again)}")
z = (result.gradient_mean - again.gradient_mean) / np.hypot(result.gradient_std, again.gradient_std).clip(1e-12)
print(f"gradient differences between the seeds, in units of their combined std: max |z| = {np.abs(z).max():.2f}")

# %% [markdown]
# ## Tree ensembles: a steadier setting
#
# A boosted-tree model is piecewise constant: next to $\mathbf x$ it is flat or it jumps, so which features look
# relevant depends on which of its steps the samples straddle. The documentation (`docs/local.md`, "Choosing a
# setting") recommends a wider box, the posterior-variance acquisition and the paper's log-normal lengthscale
# prior for trees. Below, three seeds of each setting are scored with the BO-LIME paper's inconsistency
# (`gpytorch_explain.metrics.inconsistency`: the std across seeds of each feature's normalised |relevance|, lower
# is steadier).

# %%
from gpytorch_explain.local import PRESETS  # noqa: E402
from gpytorch_explain.metrics import inconsistency  # noqa: E402

TREE_SETTING = PRESETS["tree"]  # variance, interval 2, prior scale 0.5, log-normal relevance, no stencil
relevances = {"defaults": [], "tree setting": []}
gradients = {"defaults": [], "tree setting": []}
for seed in range(3):
    for label, setting in (("defaults", {}), ("tree setting", TREE_SETTING)):
        r = LocalGPExplainer(from_sklearn_regressor(model), X_train, budget=BUDGET, seed=seed, **setting).explain(x)
        relevances[label].append(r.relevance)
        gradients[label].append(r.gradient_mean * X_train.std(0))  # per feature std, as the benchmark scores it
for label in relevances:
    print(
        f"{label:13s} inconsistency of the relevance over 3 seeds: {inconsistency(np.array(relevances[label])):.3f}, "
        f"of the gradient: {inconsistency(np.array(gradients[label])):.3f}"
    )

# %% [markdown]
# At 50 calls, on this model's first three test rows (5 seeds each), the tree setting's relevance had an
# inconsistency of 0.056, 0.049 and 0.043 against the defaults' 0.161, 0.093 and 0.046, and its gradient 0.065,
# 0.086 and 0.052 against 0.148, 0.240 and 0.047. On Boston housing with an `ExtraTreesRegressor` (20 instances ×
# 10 seeds; `benchmarks/local_vs_lime.py`) its relevance scored 0.032 against 0.079 for the defaults and 0.071 for
# LIME at 50 samples. With very few calls the comparison can turn: at 20 calls (the tutorial's small mode) the
# defaults spend 10 of them on the forward stencil next to x, rows that do not depend on the seed, and their
# relevance can come out steadier than the tree setting's. The defaults are tuned for smooth models, where the
# gradient's interval is what they protect.

# %% [markdown]
# ## A pipeline on a DataFrame with a text column
#
# Tabular data often comes as a pandas DataFrame with text columns, and the model as a pipeline that selects
# columns by name. Pass the DataFrame itself: the black box then receives DataFrames with its columns and dtypes,
# and each text column is a categorical feature that only takes values seen in the training data. Here the
# diabetes data's `sex` column is written as text, and a `ColumnTransformer` one-hot encodes it.

# %%
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder  # noqa: E402

frame = load_diabetes(as_frame=True).frame.drop(columns="target")
frame["sex"] = np.where(frame["sex"] > 0, "male", "female")  # a text column, as raw data has it
frame_train, frame_test = train_test_split(frame, test_size=0.2, random_state=0)  # the split above
pipeline = make_pipeline(
    ColumnTransformer([("sex", OneHotEncoder(), ["sex"])], remainder="passthrough"),
    GradientBoostingRegressor(random_state=0),
).fit(frame_train, y_train)
frame_result = LocalGPExplainer(from_sklearn_regressor(pipeline), frame_train, budget=BUDGET, seed=0).explain(
    frame_test.iloc[SAMPLE]
)
print(frame_result.summary())
print(frame_result.samples_frame().head(3))  # the first rows the pipeline received (x first)

# %% [markdown]
# ## A classifier: explain the probability through its logit
#
# `from_sklearn_classifier(model, k)` explains the class-`k` probability. A smooth classifier's probability is often
# saturated near the instance: $p(\mathbf x) = 0.99999$ and flat to five digits, so a surrogate of $p$ cannot see
# the slope at $\mathbf x$ while the logit $\log p - \log(1-p)$ still moves. `link="logit"` fits the surrogates to
# the logit and returns everything on the probability scale: the gradient exactly
# ($\partial p/\partial x_j = p(1-p)\,\partial\,\mathrm{logit}\,p/\partial x_j$, with $p(\mathbf x)$ observed), the
# integrated gradients and `predict` by quadrature. `attribution_noise=1e-6` makes the attribution surrogate
# interpolate, as suits a deterministic model. Here an `SVC(probability=True)` on the ten "mean" features of
# scikit-learn's bundled breast-cancer data; the check compares the gradient with central finite differences of
# `predict_proba` itself.

# %%
import warnings  # noqa: E402

from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.svm import SVC  # noqa: E402

from gpytorch_explain.local import from_sklearn_classifier  # noqa: E402

cancer = load_breast_cancer()
Xc, yc = cancer.data[:, :10], cancer.target
Xc_train, Xc_test, yc_train, yc_test = train_test_split(Xc, yc, test_size=0.2, random_state=0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # SVC(probability=True) is deprecated in scikit-learn >= 1.9
    svc = make_pipeline(StandardScaler(), SVC(probability=True, random_state=0)).fit(Xc_train, yc_train)
proba = from_sklearn_classifier(svc, 1)  # p(benign)
xc = Xc_test[int(np.argmax(proba(Xc_test)))]  # the most confident test row
clf_result = LocalGPExplainer(
    proba,
    Xc_train,
    budget=BUDGET,
    seed=0,
    feature_names=cancer.feature_names[:10],
    **PRESETS["smooth_classifier"],  # link="logit", interpolating surrogates, 16 relevance refits
).explain(xc)
h = 1e-4 * Xc_train.std(0)
step = np.diag(h)  # row j moves feature j by h_j
fd = (proba(xc + step) - proba(xc - step)) / (2 * h)  # central differences of predict_proba
z = (clf_result.gradient_mean - fd) / clf_result.gradient_std
print(f"p(x) = {proba(xc[None])[0]:.6f}, fidelity (LOO R² of the logit's surrogate) {clf_result.fidelity:.3f}")
print(f"link='logit': the finite-difference gradient inside two stds for {int((np.abs(z) < 2).sum())} of 10 features")
print(clf_result.summary())

# %% [markdown]
# On the full 30-feature data at 50 calls (20 test rows × 10 seeds, `benchmarks/local_vs_lime.py`) this setting's
# gradient was the steadiest score measured on this black box: see the table in `docs/local.md`.
