#!/usr/bin/env python3
"""The GPX paper's Tables 1-4 and Figure 2 (Yoshikawa & Iwata, §5), our rows beside the baselines, one run.

Protocol (the paper's §5.1 where it says, our choice where it does not; printed in the output too):

* Datasets: Digits and Diabetes (scikit-learn), Abalone (Sex one-hot: d = 10), Boston, Fish and Wine
  (red + white, 6,497 rows, d = 11) from ``../shared/datasets`` (see PROVENANCE.md there). Digits labels
  0-4 -> -1 and 5-9 -> +1. x and y standardised over the whole dataset (as the paper, "before training and
  prediction"); constant pixels of Digits keep std 1.
* Five random 80/20 splits (seeds 0-4); mean ± std over splits (std with ddof = 1).
* GP models (GPX, GPR with an RBF kernel, ARD = GPR with an ARD RBF kernel) in float64, initialised as the
  paper (output scale 1, σ_y = σ_w = 0.1, lengthscale by the median heuristic), hyperparameters by L-BFGS on
  the exact marginal likelihood on at most ``--fit-max`` training rows (GPR/ARD: ``--gpr-fit-max`` where
  given), then conditioned on all training rows. GPX: ``GPXModel.fit`` defaults (L-BFGS, ≤ 100 iterations; on
  Fish it converges in ~25, and 500 allowed iterations gave the same fit), σ_w and σ_y fitted too (fixing
  σ_w = 0.1 on a Fish split moved MSE 0.336 → 0.327, faithfulness 0.850 → 0.864, stability 2.05 → 1.98).
  ``gpytorch.settings.max_cholesky_size`` is raised to 6000 so every solve is a Cholesky (printed).
* "GPX (paper fit)": the same GPX model on the same rows, fitted by the authors' own procedure
  (:func:`fit_gpx_paper`: their public implementation's parametrisation, loss and L-BFGS settings), which stops
  well before the marginal likelihood's maximum with several times longer lengthscales. Both GPX columns face the
  paper's GPX numbers; ``--gpx-fit ml|paper|both`` chooses which run (``--skip-baselines``: GPX only).
* Baselines: Ridge (RidgeCV, alphas {0.1, 1, 10}), Lasso (LassoCV defaults), GPR+LIME and GPR+SHAP (on the
  GPR posterior mean; LIME tabular, continuous, 5000 samples; Kernel SHAP with a 10-centroid k-means
  background), KL (Paananen et al., on the ARD GPR, Δ = 1e-3), Localized and Network lasso
  (``benchmarks/baselines/localized_lasso.py``; fixed λ1 = 1, λ2 = 0.1 / 0, k = 10 instead of the paper's
  48-point grid search, on at most ``--lasso-max`` training rows).
* Metrics from :mod:`gpytorch_explain.metrics` with the baseline = training mean (0 after standardisation):
  faithfulness (nan-mean over test samples), sufficiency at k = 1..10 (mean over test samples), stability
  (eq. (19), ε = 0.05, the test set as neighbourhood, weights per method: see the explainers' docs), with
  each weight column standardised over the test set (Table 3) and, as a second reading of the paper's
  "standardized estimated weights", all weights divided by one std (Table 3c).
  LIME and SHAP explain at most ``--explain-max`` test samples per split (their stability then uses only
  those samples as the neighbourhood), flagged in the tables.

Usage::

    PYTHONPATH=$PWD python benchmarks/paper_tables.py            # everything (hours on 2 cores)
    PYTHONPATH=$PWD python benchmarks/paper_tables.py --quick    # 2 splits, small subsets (minutes)
    PYTHONPATH=$PWD python benchmarks/paper_tables.py --datasets diabetes boston --splits 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import gpytorch
import linear_operator
import numpy as np
import torch
from sklearn.datasets import load_diabetes, load_digits
from sklearn.linear_model import LassoCV, RidgeCV

from gpytorch_explain import GPXModel, median_heuristic_lengthscale
from gpytorch_explain.explainers import (
    ARDExplainer,
    GPXExplainer,
    KernelShapExplainer,
    KLExplainer,
    LimeExplainer,
    LinearExplainer,
)
from gpytorch_explain.metrics import faithfulness, stability, sufficiency

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.baselines.localized_lasso import LocalizedLasso  # noqa: E402
from benchmarks.paper_numbers import PAPER  # noqa: E402

DATA = Path(os.environ.get("GPX_DATASETS", Path(__file__).resolve().parents[3] / "shared" / "datasets"))
if not DATA.exists():
    DATA = Path("/work/shared/datasets")
RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = ["digits", "abalone", "diabetes", "boston", "fish", "wine"]
KS = list(range(1, 11))
CHOL = 6000
PAPER_FIT = "GPX (paper fit)"  # GPX fitted by the authors' optimiser settings (fit_gpx_paper)
EPS2 = 0.2  # a second stability radius: at the paper's 0.05 some test sets have no neighbours at all


# ----------------------------------------------------------------------------- data
def _csv(name: str) -> tuple[list[str], np.ndarray]:
    import csv

    with open(DATA / name) as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) as float64, not yet standardised."""
    if name == "digits":
        d = load_digits()
        return d.data.astype(float), np.where(d.target <= 4, -1.0, 1.0)
    if name == "diabetes":
        d = load_diabetes()
        return d.data.astype(float), d.target.astype(float)
    if name == "abalone":
        head, rows = _csv("abalone.csv")
        sex = np.array([r[0] for r in rows])
        onehot = np.stack([(sex == s).astype(float) for s in ("F", "I", "M")], 1)
        num = np.array([[float(v) for v in r[1:]] for r in rows])
        return np.concatenate([onehot, num[:, :-1]], 1), num[:, -1]
    if name in ("boston", "fish"):
        _, rows = _csv("boston_housing.csv" if name == "boston" else "qsar_fish_toxicity.csv")
        a = np.array([[float(v) for v in r] for r in rows])
        return a[:, :-1], a[:, -1]
    if name == "wine":
        parts = [
            np.array([[float(v) for v in r] for r in _csv(f)[1]])
            for f in ("wine_quality_red.csv", "wine_quality_white.csv")
        ]
        a = np.concatenate(parts, 0)
        return a[:, :-1], a[:, -1]
    raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")


def standardise(a: np.ndarray) -> np.ndarray:
    sd = a.std(0)
    return (a - a.mean(0)) / np.where(sd > 0, sd, 1.0)


# ----------------------------------------------------------------------------- GP models
class GPR(gpytorch.models.ExactGP):
    """GP regression with a scaled RBF (optionally ARD) kernel and zero mean (y is standardised)."""

    def __init__(self, x, y, ard: bool):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(ard_num_dims=x.size(-1) if ard else None)
        )

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def fit_gpr(x: torch.Tensor, y: torch.Tensor, ard: bool, max_iter: int, noise_floor: float = 1e-4) -> GPR:
    """Fit; if the covariance stops being PD during the search, refit from the start with a 100x noise floor."""
    try:
        return _fit_gpr(x, y, ard, max_iter, noise_floor)
    except linear_operator.utils.errors.NotPSDError:
        if noise_floor >= 1e-2:
            raise
        log(
            f"  {'ARD' if ard else 'GPR'} fit: covariance not PD with noise floor {noise_floor:g}; "
            f"refitting with {noise_floor * 100:g}"
        )
        return fit_gpr(x, y, ard, max_iter, noise_floor * 100)


def _fit_gpr(x: torch.Tensor, y: torch.Tensor, ard: bool, max_iter: int, noise_floor: float) -> GPR:
    model = GPR(x, y, ard).double()
    # A noise floor of 1e-4 (y is standardised): Abalone has near-duplicate rows, and without it the ARD fit drove
    # the noise towards 0 until the covariance was singular even with 1e-3 jitter.
    model.likelihood.noise_covar.register_constraint("raw_noise", gpytorch.constraints.GreaterThan(noise_floor))
    model.likelihood.noise = max(0.01, 2 * noise_floor)
    model.covar_module.outputscale = 1.0
    ls = median_heuristic_lengthscale(x)
    model.covar_module.base_kernel.lengthscale = ls * torch.ones_like(model.covar_module.base_kernel.lengthscale)
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    opt = torch.optim.LBFGS(
        model.parameters(),
        lr=1.0,
        max_iter=max_iter,
        line_search_fn="strong_wolfe",
        tolerance_change=1e-9,
        tolerance_grad=1e-6,
    )

    def closure():
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        return loss

    # Abalone's ARD fit hit a covariance that was not PD after GPyTorch's default 3 jitter tries (up to 1e-6):
    # allow jitter up to 1e-3 there (GPyTorch warns with the jitter it used).
    with gpytorch.settings.cholesky_max_tries(6):
        opt.step(closure)
    return model.eval()


def refit_on_all(model, x: torch.Tensor, y: torch.Tensor):
    """Condition a fitted model on all training rows, keeping its hyperparameters."""
    model.set_train_data(x, y, strict=False)
    return model.eval()


def fit_gpx(x: torch.Tensor, y: torch.Tensor, fit_max: int, seed: int) -> GPXModel:
    sub = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:fit_max]
    fitted = GPXModel(x[sub], y[sub]).fit()
    if len(sub) == len(x):
        return fitted
    model = GPXModel(x, y, likelihood=fitted.likelihood, base_kernel=fitted.covar_module.base_kernel)
    model.weight_noise = fitted.weight_noise.detach()
    return model.eval()


def fit_gpx_paper(x: torch.Tensor, y: torch.Tensor, fit_max: int, seed: int) -> GPXModel:
    r"""GPX fitted by the authors' own procedure (the "paper fit"), then conditioned on all rows of ``x``.

    The GPX paper (§5.1) initialises θ₁ = 1, σ_y = σ_w = 0.1 and the bandwidth by the median heuristic and
    maximises the marginal likelihood with L-BFGS. Its public implementation (``GPXRegressor`` in
    github.com/yuyay/gpx, read for its settings; no code taken) makes that concrete, and the details decide where
    the fit ends: the loss is the negative log marginal likelihood *per sample*; σ_w and σ_y themselves are the
    free parameters (the covariance uses σ_w², σ_y²), the output scale and lengthscale are GPyTorch's softplus raw
    parameters; ``torch.optim.LBFGS(lr=0.1, max_iter=150, tolerance_change=1e-4)`` without a line search, one
    ``step``. Here the same model is our ``GPXModel`` (zero mean, C = σ_y²I + (K + σ_w²I) ⊙ ZZᵀ) with σ_y and σ_w
    as raw parameters through ``Positive(transform=torch.square, inv_transform=torch.sqrt)``, and GPyTorch's
    ``ExactMarginalLogLikelihood`` (which is per sample) as the loss.

    That optimiser takes fixed steps of 0.1 × the quasi-Newton step and stops when the loss per sample changes
    by < 1e-4, i.e. well before the maximum of the marginal likelihood: on Fish it ends ~13 nats below the
    ``GPXModel.fit`` optimum with lengthscales ~3× longer (``results/gpx_faithfulness_fish.md``). It is a
    reproduction of the paper's numbers, not a fitting method this library recommends.
    """
    sub = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:fit_max]
    xs, ys = x[sub], y[sub]

    def square_of_raw():
        return gpytorch.constraints.Positive(transform=torch.square, inv_transform=torch.sqrt)

    likelihood = gpytorch.likelihoods.GaussianLikelihood(noise_constraint=square_of_raw()).to(x.dtype)
    likelihood.noise = torch.tensor(0.01, dtype=x.dtype)
    model = GPXModel(xs, ys, likelihood=likelihood)  # output scale 1, median-heuristic lengthscale, zero mean
    model.covar_module.register_constraint("raw_weight_noise", square_of_raw())
    model.weight_noise = torch.tensor(0.01, dtype=x.dtype)
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=150, tolerance_change=1e-4)

    def closure():
        opt.zero_grad()
        loss = -mll(model(xs), ys)
        loss.backward()
        return loss

    opt.step(closure)
    model.eval()
    if len(sub) == len(x):
        return model
    full = GPXModel(x, y, likelihood=model.likelihood, base_kernel=model.covar_module.base_kernel)
    full.covar_module.register_constraint("raw_weight_noise", square_of_raw())
    full.weight_noise = model.weight_noise.detach()
    return full.eval()


def time_pytorch_gpx(x, y, xte: np.ndarray, yte: np.ndarray, fit_max: int, seed: int, res: dict, timed) -> None:
    """Time the authors' implementation (``pytorch-gpx``'s ``GPXRegressor``, the ``bench`` extra) on our GPX's
    fitting rows and test points, for Table 4: its fit (started as the paper says: θ₁ = 1, the median-heuristic
    lengthscale, σ_w = σ_y = 0.1) and its weight posterior (means and d × d covariances) for all test points."""
    from gpx import GPXRegressor

    sub = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:fit_max]
    xs, ys = x[sub], y[sub]

    def fit():
        reg = GPXRegressor(dtype=torch.float64)
        reg.model.kernel_obj.base_kernel.lengthscale = float(median_heuristic_lengthscale(xs))
        reg.model.kernel_obj.outputscale = 1.0
        return reg.fit(xs.numpy(), ys.numpy(), None)

    reg = timed("pytorch-gpx/train", fit)
    out = timed("pytorch-gpx/explain", lambda: reg.predict(xte, return_weights=True))
    res["mse"]["pytorch-gpx"] = float(np.mean((np.asarray(out[0]).reshape(-1) - yte) ** 2))
    log(f"  pytorch-gpx mse {res['mse']['pytorch-gpx']:.3f} ({res['time']['pytorch-gpx/train']:.0f}s fit)")


def posterior_mean(model):
    def f(t):
        with torch.no_grad():
            return model(t).mean

    return f


# ----------------------------------------------------------------------------- one split
def evaluate(name, expl_out, x_eval, predict_fn, m_total, rec, out_key):
    c = expl_out.contributions
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        faith = faithfulness(predict_fn, x_eval, c, baseline=np.zeros(x_eval.shape[1]))
        suff = sufficiency(predict_fn, x_eval, c, baseline=np.zeros(x_eval.shape[1]), k=KS)
        w = expl_out.weights if expl_out.weights is not None else c
        stab_per = stability(x_eval, w, reduction="none")
        stab2 = stability(x_eval, w, eps=EPS2, reduction="none")
        stab_g = stability(x_eval, w, reduction="none", standardise="global")
    rec[out_key] = {
        "faithfulness": float(np.nanmean(faith)),
        "faith_nan": int(np.isnan(faith).sum()),
        "sufficiency": suff.mean(1).tolist(),
        "stability": float(np.nanmean(stab_per)) if np.isfinite(stab_per).any() else float("nan"),
        "stab_with_neighbour": int(np.isfinite(stab_per).sum()),
        "stability_global": float(np.nanmean(stab_g)) if np.isfinite(stab_g).any() else float("nan"),
        "stability_eps2": float(np.nanmean(stab2)) if np.isfinite(stab2).any() else float("nan"),
        "stab2_with_neighbour": int(np.isfinite(stab2).sum()),
        "n_eval": int(x_eval.shape[0]),
        "m_test": int(m_total),
        # near 0: every sample has the same weights (one global linear model), so faithfulness is 1 and stability 0
        # by construction (see benchmarks/lasso_weight_spread.py)
        "weight_spread": float(np.std(w, axis=0).mean() / max(np.abs(w).mean(), np.finfo(float).tiny)),
    }


def run_split(ds: str, x: np.ndarray, y: np.ndarray, seed: int, args) -> dict:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(x))
    n_tr = int(round(0.8 * len(x)))
    tr, te = perm[:n_tr], perm[n_tr:]
    xtr, ytr, xte, yte = x[tr], y[tr], x[te], y[te]
    txtr, tytr, txte = (torch.as_tensor(a) for a in (xtr, ytr, xte))
    m = len(te)
    res: dict = {"mse": {}, "metrics": {}, "time": {}}
    sub_eval = np.arange(min(m, args.explain_max))
    torch.manual_seed(seed)

    def timed(key, fn):
        t0 = time.perf_counter()
        out = fn()
        res["time"][key] = time.perf_counter() - t0
        return out

    # --- GPX: fitted to the marginal likelihood's optimum ("GPX") and by the authors' procedure ("GPX (paper fit)")
    if args.gpx_fit in ("ml", "both"):
        gpx = timed("GPX/train", lambda: fit_gpx(txtr, tytr, args.fit_max, seed))
        gpx_out = timed("GPX/explain", lambda: GPXExplainer(gpx).explain(txte))
        gpx_pred = posterior_mean(gpx)
        res["mse"]["GPX"] = float(np.mean((gpx_pred(txte).numpy() - yte) ** 2))
        evaluate("GPX", gpx_out, txte, gpx_pred, m, res["metrics"], "GPX")
        log(
            f"  GPX mse {res['mse']['GPX']:.3f} faith {res['metrics']['GPX']['faithfulness']:.3f} "
            f"stab {res['metrics']['GPX']['stability']:.3f} ({res['time']['GPX/train']:.0f}s)"
        )
        if ds == "digits" and seed == 0:
            digit_maps(gpx, txte, yte)
            if _has_pytorch_gpx():
                time_pytorch_gpx(txtr, tytr, xte, yte, args.fit_max, seed, res, timed)
    if args.gpx_fit in ("paper", "both"):
        key = PAPER_FIT
        gpxp = timed(f"{key}/train", lambda: fit_gpx_paper(txtr, tytr, args.fit_max, seed))
        gpxp_out = timed(f"{key}/explain", lambda: GPXExplainer(gpxp).explain(txte))
        gpxp_pred = posterior_mean(gpxp)
        res["mse"][key] = float(np.mean((gpxp_pred(txte).numpy() - yte) ** 2))
        evaluate(key, gpxp_out, txte, gpxp_pred, m, res["metrics"], key)
        kern = gpxp.covar_module.base_kernel
        res["paper_fit_hyper"] = {
            "lengthscale": kern.base_kernel.lengthscale.detach().mean().item(),
            "outputscale": kern.outputscale.detach().item(),
            "sigma_w2": gpxp.weight_noise.detach().item(),
            "sigma_y2": gpxp.likelihood.noise.detach().item(),
        }
        log(
            f"  {key} mse {res['mse'][key]:.3f} faith {res['metrics'][key]['faithfulness']:.3f} "
            f"stab {res['metrics'][key]['stability']:.3f} ({res['time'][key + '/train']:.0f}s; "
            + ", ".join(f"{k} {v:.3g}" for k, v in res["paper_fit_hyper"].items())
            + ")"
        )
    if args.skip_baselines:
        res["n_train"], res["m_test"], res["n_eval_agnostic"] = n_tr, m, int(len(sub_eval))
        res["seed"], res["fit_rows"], res["gp_iter"] = seed, int(min(args.fit_max, n_tr)), args.gp_iter
        res["gpr_fit_rows"] = int(min(args.fit_max if args.gpr_fit_max is None else args.gpr_fit_max, n_tr))
        return res

    # --- GPR (+LIME, +SHAP)
    gpr_fit_max = args.fit_max if args.gpr_fit_max is None else args.gpr_fit_max
    sub = torch.randperm(n_tr, generator=torch.Generator().manual_seed(seed))[:gpr_fit_max]
    gpr = timed("GPR/train", lambda: refit_on_all(fit_gpr(txtr[sub], tytr[sub], False, args.gp_iter), txtr, tytr))
    gpr_pred = posterior_mean(gpr)
    res["mse"]["GPR"] = float(np.mean((gpr_pred(txte).numpy() - yte) ** 2))

    def np_pred(a):
        return gpr_pred(torch.as_tensor(np.asarray(a, dtype=np.float64))).numpy()

    if not args.skip_agnostic:
        xs = txte[sub_eval]
        lime = LimeExplainer(np_pred, xtr, num_samples=args.lime_samples, seed=seed)
        lime_out = timed("GPR+LIME/explain", lambda: lime.explain(xs.numpy()))
        evaluate("GPR+LIME", lime_out, xs, gpr_pred, m, res["metrics"], "GPR+LIME")
        import shap

        bg = shap.kmeans(xtr, 10).data
        kshap = KernelShapExplainer(np_pred, bg, nsamples=args.shap_samples, seed=seed)
        shap_out = timed("GPR+SHAP/explain", lambda: kshap.explain(xs.numpy()))
        evaluate("GPR+SHAP", shap_out, xs, gpr_pred, m, res["metrics"], "GPR+SHAP")
        log(
            f"  GPR mse {res['mse']['GPR']:.3f}; LIME faith {res['metrics']['GPR+LIME']['faithfulness']:.3f}, "
            f"SHAP faith {res['metrics']['GPR+SHAP']['faithfulness']:.3f} on {len(sub_eval)} samples"
        )

    # --- ARD and KL
    ard = timed("ARD/train", lambda: refit_on_all(fit_gpr(txtr[sub], tytr[sub], True, args.gp_iter), txtr, tytr))
    ard_pred = posterior_mean(ard)
    res["mse"]["ARD"] = float(np.mean((ard_pred(txte).numpy() - yte) ** 2))
    evaluate("ARD", ARDExplainer(ard).explain(txte), txte, ard_pred, m, res["metrics"], "ARD")
    kl_out = timed("KL/explain", lambda: KLExplainer(ard).explain(txte))
    evaluate("KL", kl_out, txte, ard_pred, m, res["metrics"], "KL")

    # --- linear models
    ridge = timed("Ridge/train", lambda: RidgeCV(alphas=(0.1, 1.0, 10.0)).fit(xtr, ytr))
    lasso = timed("Lasso/train", lambda: LassoCV(random_state=seed).fit(xtr, ytr))
    for key, lm in (("Ridge", ridge), ("Lasso", lasso)):
        res["mse"][key] = float(np.mean((lm.predict(xte) - yte) ** 2))
        evaluate(key, LinearExplainer(lm).explain(xte), xte, lm.predict, m, res["metrics"], key)

    # --- localized / network lasso
    if not args.skip_lasso:
        lsub = rng.permutation(n_tr)[: args.lasso_max]
        for key, lam2 in (("Localized", 0.1), ("Network", 0.0)):
            ll = timed(
                f"{key}/train",
                lambda lam2=lam2: LocalizedLasso(
                    lam1=1.0, lam2=lam2, k=10, max_iter=args.lasso_iter, cg_maxiter=300, cg_tol=1e-6
                ).fit(xtr[lsub], ytr[lsub]),
            )
            w = timed(f"{key}/explain", lambda ll=ll: ll.test_weights(xte))
            res["mse"][key] = float(np.mean((ll.predict(xte) - yte) ** 2))
            from gpytorch_explain.explainers import ExplainerOutput

            evaluate(key, ExplainerOutput(w * xte, None, w), xte, ll.predict, m, res["metrics"], key)
        log(
            f"  Localized mse {res['mse']['Localized']:.3f} faith "
            f"{res['metrics']['Localized']['faithfulness']:.3f} ({res['time']['Localized/train']:.0f}s)"
        )
    res["n_train"], res["m_test"], res["n_eval_agnostic"] = n_tr, m, int(len(sub_eval))
    res["seed"], res["fit_rows"], res["gp_iter"] = seed, int(min(args.fit_max, n_tr)), args.gp_iter
    res["gpr_fit_rows"] = int(min(gpr_fit_max, n_tr))
    return res


def digit_maps(gpx, txte, yte) -> None:
    """GPX weight maps of three test digits with y = -1 and three with y = +1 (paper Figure 3, standardised x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpytorch_explain.explainers import plot_weight_maps

    idx = np.concatenate([np.flatnonzero(yte < 0)[:3], np.flatnonzero(yte > 0)[:3]])
    expl = gpx.explain(txte[idx])
    fig = plot_weight_maps(
        expl.weights_mean, std=expl.weights_std, images=txte[idx], titles=[f"y = {int(v):+d}" for v in yte[idx]]
    )
    fig.suptitle("GPX on Digits: input (standardised), E[w], ±1 posterior std of w")
    fig.savefig(RESULTS / "gpx_digits_weight_maps.png", dpi=60)
    plt.close(fig)


# ----------------------------------------------------------------------------- reporting
def log(msg: str) -> None:
    print(msg, flush=True)


def ms(values) -> str:
    v = np.asarray([a for a in values if a is not None and np.isfinite(a)], dtype=float)
    if v.size == 0:
        return "n/a"
    if v.size == 1:
        return f"{v[0]:.3f}"
    return f"{v.mean():.3f} ± {v.std(ddof=1):.3f}"


def _row_label(runs: list, args) -> str:
    """ "k splits", plus the GP fitting rows where they differ from the header's ``--fit-max``."""
    lab = f"{len(runs)} splits"
    fits = sorted(
        {
            (r.get("fit_rows"), r.get("gpr_fit_rows", r.get("fit_rows")), r.get("n_train"), r.get("gp_iter"))
            for r in runs
        },
        key=str,
    )
    for rows, grows, n_tr, it in fits:
        if rows is not None and (rows != min(args.fit_max, n_tr) or grows != rows or it != args.gp_iter):
            lab += (
                f"; GPX fitted on {'all ' if rows == n_tr else ''}{rows} of {n_tr} rows, GPR/ARD on "
                f"{'all ' if grows == n_tr else ''}{grows} rows with {it} L-BFGS its"
            )
    return lab


def write_markdown(all_res: dict, args, path: Path) -> str:
    L = [
        "# GPX paper, Tables 1-4 and Figure 2: ours beside the paper's",
        "",
        f"Generated by `benchmarks/paper_tables.py {' '.join(sys.argv[1:])}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). Each cell: **ours** mean ± std over the "
        "splits run (std ddof = 1) / *paper*. ± is ±1 std over splits.",
        "",
        "Settings: splits per dataset as in each row (`benchmarks/run_paper_tables.sh` lists the invocations); "
        f"GP hyperparameters fitted on ≤ {args.fit_max} training rows, then "
        f"conditioned on all; `gpytorch.settings.max_cholesky_size({CHOL})` (default 800) so all GP solves are "
        f"Cholesky; LIME/SHAP on ≤ {args.explain_max} test samples per split (LIME {args.lime_samples} samples, "
        f"SHAP nsamples = {args.shap_samples}, 10-means background); localized/network lasso with fixed "
        f"λ1 = 1, λ2 = 0.1 / 0, k = 10 (no grid search) on ≤ {args.lasso_max} training rows, "
        f"{args.lasso_iter} IRLS steps.",
        "",
        "Two GPX columns: **GPX** is fitted to the marginal likelihood's optimum (`GPXModel.fit`, the library's "
        "fit); **GPX (paper fit)** is the same model on the same rows fitted by the authors' own procedure "
        "(`fit_gpx_paper`: σ_w and σ_y as the free parameters, the loss per sample, L-BFGS with step 0.1, ≤ 150 "
        "iterations and a 1e-4 loss tolerance, from the paper's initial values; it gives the same hyperparameters "
        "as pytorch-gpx's `GPXRegressor`), which stops well short of that optimum with 2–3× longer lengthscales. "
        "Both face the paper's GPX numbers; see the section on GPX faithfulness below.",
        "",
    ]
    tables = [
        (
            "Table 1: test MSE (lower is better)",
            "mse",
            ["GPX", PAPER_FIT, "Localized", "Network", "ARD", "Lasso", "Ridge", "GPR"],
        ),
        (
            "Table 2: faithfulness (higher is better)",
            "faithfulness",
            ["GPX", PAPER_FIT, "GPR+LIME", "GPR+SHAP", "KL", "Localized", "Network", "ARD"],
        ),
        (
            "Table 3: stability, eq. (19), ε = 0.05 as the paper (lower is better)",
            "stability",
            ["GPX", PAPER_FIT, "GPR+LIME", "GPR+SHAP", "KL", "Localized", "Network"],
        ),
        (
            f"Table 3b: stability with ε = {EPS2} (ours only; paper column repeats its ε = 0.05 values)",
            "stability_eps2",
            ["GPX", PAPER_FIT, "GPR+LIME", "GPR+SHAP", "KL", "Localized", "Network"],
        ),
        (
            "Table 3c: stability, ε = 0.05, weights standardised by one std over all entries "
            '(`stability(..., standardise="global")`; the paper\'s "standardized weights" fits both; only splits '
            "run after this column was added have it, n/a otherwise)",
            "stability_global",
            ["GPX", PAPER_FIT, "GPR+LIME", "GPR+SHAP", "KL", "Localized", "Network"],
        ),
    ]
    for title, key, methods in tables:
        L += [f"## {title}", "", "| dataset | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
        for ds, runs in all_res.items():
            cells = []
            for meth in methods:
                if key == "mse":
                    ours = ms([r["mse"].get(meth) for r in runs])
                else:
                    ours = ms([r["metrics"].get(meth, {}).get(key) for r in runs])
                paper_meth = "GPX" if meth == PAPER_FIT else meth  # both GPX columns face the paper's GPX
                paper = PAPER.get(key.replace("_eps2", "").replace("_global", ""), {}).get(ds, {}).get(paper_meth, "–")
                flag = ""
                if key != "mse" and meth in ("GPR+LIME", "GPR+SHAP") and runs and meth in runs[0]["metrics"]:
                    flag = f" ({runs[0]['metrics'][meth]['n_eval']}/{runs[0]['m_test']})"
                if key != "mse":
                    # splits whose value is finite (a split without two explained samples within ε has none)
                    values = [r["metrics"].get(meth, {}).get(key) for r in runs]
                    have = sum(v is not None and np.isfinite(v) for v in values)
                    flag += f" [{have} of {len(runs)} splits]" if 0 < have < len(runs) else ""
                    spreads = [r["metrics"].get(meth, {}).get("weight_spread") for r in runs]
                    spreads = [v for v in spreads if v is not None]
                    if key in ("faithfulness", "stability") and spreads and max(spreads) < 1e-3:
                        flag += " (one global model)"
                cells.append(f"**{ours}**{flag} / *{paper}*")
            L.append(f"| {ds} ({_row_label(runs, args)}) | " + " | ".join(cells) + " |")
        L.append("")
    L += [
        "(n/m) after LIME/SHAP: explained n of m test samples per split; their stability neighbourhood is those n "
        "(GPX, KL and the lassos use all m test samples), so their stability cells are not on the same samples as "
        "the others'. [k of N splits]: only k splits had two explained samples within ε (or ran that column); "
        "the cell is over those k.",
        "",
        "**Localized / Network lasso are (nearly) global models here.** With these fixed λ (no grid search) their "
        "per-sample weights hardly differ (`benchmarks/lasso_weight_spread.py`, "
        "`results/lasso_weight_spread.txt`, relative spread of the weights, Localized / Network: 3e-6–3e-5 on "
        "Diabetes, 0.003–0.04 / 0.0006–0.011 on Wine, 0.04–0.10 / 0.006–0.015 on Fish, against 0.43–0.68 / "
        "0.06–0.39 on Boston and Abalone and 0.9–1.1 / 0.14–0.17 on Digits). Where they do not differ, removing a "
        "feature leaves the weights unchanged, "
        "so faithfulness is 1 and stability near 0 by construction: those cells do not rank the methods as local "
        "explainers (the paper tuned λ on a 48-point grid). Rows from runs that record the spread flag such cells "
        "'(one global model)'.",
        "",
        "For a seed run more than once (`--merge` of several files) the later file's numbers win method by "
        "method; a method the later run skipped (`--skip-agnostic`) keeps the earlier file's numbers (see "
        "`run_paper_tables.sh` for which files fill which cells).",
        "",
    ]
    L += profile_section()
    L += [
        "## Stability details (GPX)",
        "",
        f"| dataset | samples with a neighbour at ε = 0.05 / ε = {EPS2}, mean over splits | "
        "faithfulness nan (constant rows), all splits |",
        "|---|---|---|",
    ]
    for ds, runs in all_res.items():
        if "GPX" not in _common_methods(runs):
            continue
        g = [r["metrics"]["GPX"] for r in runs]
        L.append(
            f"| {ds} | {np.mean([a['stab_with_neighbour'] for a in g]):.0f} / "
            f"{np.mean([a['stab2_with_neighbour'] for a in g]):.0f} of {g[0]['m_test']} | "
            f"{sum(a['faith_nan'] for a in g)} |"
        )
    L += [
        "",
        "## Figure 2: sufficiency at k = 1..10 (lower is better), ours, mean over splits",
        "",
        "See `paper_fig2_sufficiency.png` (shaded: ±1 std over splits). Values:",
        "",
    ]
    for ds, runs in all_res.items():
        L += [f"**{ds}**", "", "| method | " + " | ".join(f"k={k}" for k in KS) + " |", "|---" * (len(KS) + 1) + "|"]
        for meth in _common_methods(runs):
            arr = np.array([r["metrics"][meth]["sufficiency"] for r in runs])
            L.append(f"| {meth} | " + " | ".join(f"{v:.3f}" for v in arr.mean(0)) + " |")
        L.append("")
    if "digits" in all_res:
        t = all_res["digits"][0]["time"]
        L += [
            "## Table 4: times on Digits, seconds (split 0; ours / *paper*)",
            "",
            "pytorch-gpx, the authors' implementation (`bench` extra), "
            + (
                "is timed in the same run on GPX's fitting rows (its fit started as the paper says; test MSE "
                f"{all_res['digits'][0]['mse']['pytorch-gpx']:.3f} predicting from those rows only, ours "
                f"{all_res['digits'][0]['mse']['GPX']:.3f} conditioned on all training rows)"
                if "pytorch-gpx/train" in t
                else "was **not installed** in the run that made this split, so it is not timed"
            )
            + f". Our machine: {os.cpu_count()} CPU cores shared with other jobs and with the other runs of this "
            "table (wall-clock times, inflated several-fold by the load; compare ratios, not seconds; paper: "
            "16-core Xeon).",
            "",
            "| | GPX | pytorch-gpx | GPR+LIME | GPR+SHAP | KL | Localized | Network | ARD |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        tr = {
            "GPX": t.get("GPX/train"),
            "pytorch-gpx": t.get("pytorch-gpx/train"),
            "GPR+LIME": t.get("GPR/train"),
            "GPR+SHAP": t.get("GPR/train"),
            "KL": t.get("ARD/train"),
            "Localized": t.get("Localized/train"),
            "Network": t.get("Network/train"),
            "ARD": t.get("ARD/train"),
        }
        n_ag = all_res["digits"][0]["n_eval_agnostic"]
        m = all_res["digits"][0]["m_test"]
        pr = {
            "GPX": t.get("GPX/explain"),
            "pytorch-gpx": t.get("pytorch-gpx/explain"),
            "KL": t.get("KL/explain"),
            "Localized": t.get("Localized/explain"),
            "Network": t.get("Network/explain"),
            "ARD": None,  # one global relevance vector: nothing is computed per sample (not timed)
        }
        for meth in ("GPR+LIME", "GPR+SHAP"):
            v = t.get(f"{meth}/explain")
            pr[meth] = None if v is None else v * m / n_ag
        order = ["GPX", "pytorch-gpx", "GPR+LIME", "GPR+SHAP", "KL", "Localized", "Network", "ARD"]

        def cell(v, meth, row):
            p = PAPER["time"][row].get(meth, "–")
            return f"{'n/a' if v is None else f'{v:.2f}'} / *{p}*"

        L.append("| Training | " + " | ".join(cell(tr[k], k, "Training") for k in order) + " |")
        L.append("| Prediction | " + " | ".join(cell(pr[k], k, "Prediction") for k in order) + " |")
        L += [
            "",
            f"GPR+LIME/SHAP prediction times are measured on {n_ag} test samples and scaled to all {m}. "
            "GPX training includes the fit on ≤ fit-max rows; prediction = the full weight posterior "
            "(means and d × d covariances) for all test points.",
            "",
        ]
    text = "\n".join(L)
    path.write_text(text)
    return text


def profile_section() -> list[str]:
    """The summary tables of ``gpx_faithfulness_<dataset>.md`` (``benchmarks/gpx_faithfulness_profile.py``)."""
    out: list[str] = []
    for path in sorted(RESULTS.glob("gpx_faithfulness_*.md")):
        lines = path.read_text().splitlines()
        rows = [
            ln
            for ln in lines[: next((i for i, ln in enumerate(lines) if ln.startswith("Per split")), None)]
            if ln.startswith("|")
        ]
        if not rows:
            continue
        ds = path.stem.removeprefix("gpx_faithfulness_")
        if not out:
            out += [
                "## GPX faithfulness against the lengthscale and the fit (why Fish's ML fit misses the paper)",
                "",
                "From `benchmarks/gpx_faithfulness_profile.py` (per-split numbers in the files named): the same "
                "splits, GPX fitted by maximum likelihood (ML, the tables' GPX column), by the authors' own "
                "procedure (paper-fit: `fit_gpx_paper`, the tables' GPX (paper fit) column), by leave-one-out "
                "cross-validation where run (LOO: the hyperparameters maximising the leave-one-out predictive log "
                "density, gpytorch's LeaveOneOutPseudoLikelihood), and with the RBF lengthscale held at 1.5× / 2× "
                "the ML value "
                "(the other hyperparameters refitted). neg_log_ml: −log marginal likelihood on the fitting rows "
                "(nats, lower = better fit). faith: the tables' reading (baseline 0, per-sample Pearson r, mean "
                "over samples); faith_train_mean: the split's own training mean as baseline; faith_median: "
                "median over samples; faith_pooled: one r over all sample-feature pairs.",
                "",
            ]
        out += [f"**{ds}** (`{path.name}`)", "", *rows, ""]
    if out:
        out += [
            "Reading (Fish): the open choices of the metric (baseline; NaN handling: no Fish sample is NaN) do "
            "not move the mean reading (the median is higher because a few samples with negative r pull the mean "
            "down, but the paper averages). What moves GPX's faithfulness, stability and (slightly) MSE is the "
            "lengthscale: longer than the ML value, the weights change less when a feature is set to its baseline, "
            "so the prediction drop tracks the contribution w_j x_j more closely. The authors' own procedure "
            "(paper-fit: σ_w and σ_y as the free parameters, the loss per sample, L-BFGS with fixed steps of 0.1 "
            "× the quasi-Newton step and a 1e-4 loss tolerance, from the paper's initial values) stops after about "
            "80 evaluations, ~13 nats below the ML optimum, at lengthscales ≈ 4.0 (2.9× ML): faithfulness 0.960, "
            "stability 1.315, MSE 0.350, at or beyond the paper's Fish numbers, and the likeliest origin of them "
            "(the same procedure reaches the paper's faithfulness and stability on every dataset: the GPX (paper "
            "fit) columns). An earlier emulation (ref-opt, until 2026-11-28) applied those optimiser settings to "
            "GPXModel's own parametrisation (the softplus of σ_w², σ_y²) and converged nearly to ML (faithfulness "
            "0.862): where such an optimiser stops depends on the parametrisation, not only on its settings. "
            "Cross-validation does not favour long lengthscales: the leave-one-out fit (LOO) chooses a SHORTER "
            "lengthscale than ML (0.97 vs 1.39 on Fish), with lower faithfulness (0.771) and a higher MSE; only the "
            "test MSE leans slightly towards longer lengthscales (0.343 at ℓ×1.5 vs 0.352), within one std over "
            "splits. The GPX column keeps the ML fit (the library's GPXModel.fit), the paper fit stands beside it. "
            "On Digits (one split) the lengthscale lever costs more: ℓ×1.5 raises faithfulness 0.885 → 0.911 at 38 "
            "nats of marginal likelihood and a higher MSE (0.066 vs 0.058).",
            "",
        ]
    return out


def merge_record(old: dict, new: dict) -> dict:
    """One split's record from two runs of the same seed: ``new`` wins, methods only in ``old`` are kept."""
    out = dict(new)
    for key in ("mse", "metrics", "time"):
        out[key] = {**old.get(key, {}), **new.get(key, {})}
    return out


def _common_methods(runs: list) -> list[str]:
    """Methods with metrics in every split (splits merged from runs of different scope may differ)."""
    return [k for k in runs[0]["metrics"] if all(k in r["metrics"] for r in runs)]


def _has_pytorch_gpx() -> bool:
    """Whether pytorch-gpx (the authors' implementation; its import name is ``gpx``) is installed."""
    try:
        import gpx  # noqa: F401
    except ImportError:
        return False
    return True


def plot_fig2(all_res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(all_res)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), squeeze=False)
    for ax, ds in zip(axes.ravel(), names, strict=False):
        runs = all_res[ds]
        for meth in _common_methods(runs):
            if meth in ("Ridge", "Lasso"):
                continue
            arr = np.array([r["metrics"][meth]["sufficiency"] for r in runs])
            mu = arr.mean(0)
            sd = arr.std(0, ddof=1) if len(arr) > 1 else np.zeros_like(mu)
            ax.plot(KS, mu, marker="o", ms=3, label=meth)
            ax.fill_between(KS, mu - sd, mu + sd, alpha=0.15)
        ax.set_title(ds)
        ax.set_xlabel("k (features kept)")
        ax.set_ylabel("sufficiency |f(x) - f(x_k)|")
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7)
    fig.suptitle("Sufficiency (lower is better); shaded: ±1 std over splits")
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=DATASETS, choices=DATASETS)
    p.add_argument("--splits", type=int, default=5)
    p.add_argument(
        "--first-split",
        type=int,
        default=0,
        help="seed of the first split (run splits first-split .. first-split + splits - 1)",
    )
    p.add_argument("--quick", action="store_true", help="2 splits, small subsets: a smoke run of the pipeline")
    p.add_argument("--fit-max", type=int, default=2500, help="rows for fitting GP hyperparameters")
    p.add_argument("--gp-iter", type=int, default=100, help="L-BFGS iterations for GPR/ARD")
    p.add_argument(
        "--gpr-fit-max",
        type=int,
        default=None,
        help="rows for fitting the GPR/ARD hyperparameters (default: --fit-max)",
    )
    p.add_argument("--explain-max", type=int, default=100, help="test samples explained by LIME/SHAP per split")
    p.add_argument("--lime-samples", type=int, default=5000)
    p.add_argument("--shap-samples", type=int, default=512)
    p.add_argument("--lasso-max", type=int, default=1500, help="training rows for localized/network lasso")
    p.add_argument("--lasso-iter", type=int, default=30)
    p.add_argument("--skip-agnostic", action="store_true", help="no LIME/SHAP")
    p.add_argument("--skip-lasso", action="store_true", help="no localized/network lasso")
    p.add_argument(
        "--gpx-fit",
        choices=["ml", "paper", "both"],
        default="both",
        help="GPX rows: fitted to the marginal likelihood's optimum (ml: GPXModel.fit), by the authors' optimiser "
        "settings (paper: fit_gpx_paper), or both (default)",
    )
    p.add_argument("--skip-baselines", action="store_true", help="only the GPX rows (no GPR, ARD, KL, linear, lasso)")
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="JSON",
        help="only render: merge these raw result files (from runs with --out) into --out",
    )
    p.add_argument("--out", default=None, help="markdown path (default results/paper_tables[_quick].md)")
    args = p.parse_args()
    if args.quick:
        args.splits, args.fit_max, args.explain_max = 2, min(args.fit_max, 500), min(args.explain_max, 20)
        args.lime_samples, args.shap_samples, args.lasso_max, args.lasso_iter = 1000, 128, 300, 10
        args.gp_iter = min(args.gp_iter, 50)
    RESULTS.mkdir(exist_ok=True)
    out = Path(args.out or RESULTS / ("paper_tables_quick.md" if args.quick else "paper_tables.md"))
    raw_path = out.with_suffix(".json")
    if args.merge:
        # Splits of one dataset from several files are pooled (records written before seeds were stored count as
        # seeds 0, 1, ... in file order). For a repeated seed the later file wins method by method: a method the
        # later run skipped (--skip-agnostic, --skip-lasso) keeps the earlier file's numbers.
        merged: dict = {}
        for path in args.merge:
            for ds, runs in json.loads(Path(path).read_text()).items():
                by_seed = {r.get("seed", i): r for i, r in enumerate(merged.get(ds, []))}
                for i, r in enumerate(runs):
                    key = r.get("seed", i)
                    by_seed[key] = merge_record(by_seed[key], r) if key in by_seed else r
                merged[ds] = [by_seed[k] for k in sorted(by_seed)]
        merged = {ds: merged[ds] for ds in DATASETS if merged.get(ds)}  # datasets with at least one split
        raw_path.write_text(json.dumps(merged, indent=1))
        plot_fig2(merged, out.with_name("paper_fig2_sufficiency.png"))
        print(write_markdown(merged, args, out))
        return
    all_res: dict = json.loads(raw_path.read_text()) if raw_path.exists() else {}
    all_res = {k: v for k, v in all_res.items() if k not in args.datasets}
    log(
        f"max_cholesky_size = {CHOL} (GPyTorch default 800); torch {torch.__version__}, "
        f"gpytorch {gpytorch.__version__}; {torch.get_num_threads()} threads"
    )
    with gpytorch.settings.max_cholesky_size(CHOL):
        for ds in args.datasets:
            x, y = load(ds)
            x, y = standardise(x), standardise(y[:, None])[:, 0]
            log(f"{ds}: n = {len(x)}, d = {x.shape[1]}")
            all_res[ds] = []
            for seed in range(args.first_split, args.first_split + args.splits):
                t0 = time.perf_counter()
                all_res[ds].append(run_split(ds, x, y, seed, args))
                log(f" split {seed} done in {time.perf_counter() - t0:.0f}s")
                raw_path.write_text(json.dumps(all_res, indent=1))
                write_markdown(all_res, args, out)
            plot_fig2({k: v for k, v in all_res.items()}, out.with_name("paper_fig2_sufficiency.png"))
    print(write_markdown(all_res, args, out))


if __name__ == "__main__":
    main()
