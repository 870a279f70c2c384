#!/usr/bin/env python3
"""GPX at scale: scalable base kernels on 1e4–1e6 rows, side by side with a standard GPyTorch GPR.

For one data set and one scalable method, the script fits

* ``GPXModel`` with the method's kernel as ``base_kernel`` (``model.fit()``: L-BFGS; CG/Lanczos above
  the dense limit ``gpytorch_explain.settings.max_cholesky_size``), and
* a standard GPyTorch ``ExactGP`` regression model with the same kernel (same L-BFGS settings),

each in its own (spawned) process so that their peak resident memory is measured separately, and
prints one table with: the fit time and number of objective evaluations, the test RMSE (in
standardised units; GPX predicts with :math:`\\hat y_* = \\mathbf z_*^\\top \\mathbb E[\\mathbf w_*]`), the
time of the weight posterior (means and standard deviations) at ``--n-test`` test points, the peak
RSS (``resource.getrusage``), and on synthetic data the coverage of the 95% intervals of the true
local weights.

Methods (the same kernel for GPX's :math:`k` and for the GPR):

* ``sgpr``: ``InducingPointKernel(ScaleKernel(RBFKernel(ard)), k random training inputs)``;
* ``kissgp``: ``ScaleKernel(GridInterpolationKernel(RBFKernel(ard), grid, num_dims=D))`` for
  ``D <= 3``, else ``ScaleKernel(AdditiveStructureKernel(GridInterpolationKernel(RBFKernel(), grid,
  num_dims=1), D))`` (an additive model), or ``ProductStructureKernel`` with ``--kiss-structure product``.
  GPX treats grids and additive structures through exact grid features (Woodbury in the grid root's
  feature space, see ``gpytorch_explain.settings.use_grid_features``) when the root is narrow enough, and
  the CG/LOVE path otherwise; the GPR uses GPyTorch's KISS-GP (CG, and LOVE for the variances);
* ``exact``: ``ScaleKernel(gpytorch.kernels.keops.RBFKernel(ard))``. Without pykeops this falls back to
  a dense ``n x n`` kernel (about ``8 n^2`` bytes), so it is refused above ``--max-dense-n``. With
  ``--lean`` it is ``PartitionedKernel(ScaleKernel(RBFKernel(ard)))``: products and the backward pass in
  row blocks (``gpytorch_explain.kernels.PartitionedKernel``), never an ``n x n`` kernel.

Data (``--data-dir``, default ``../shared/datasets`` relative to the repository root; features and
target standardised with the training split's statistics, ``z = x``):

* ``synthetic``: drawn from the GPX prior with known weights. ``x ~ N(0, I_D)``, ``z = x``,
  ``w(x) = g(x) + eps_w`` with each ``g_l`` an independent GP(0, RBF) sample approximated by random
  Fourier features, ``y = w^T z + eps_y``. The true ``w`` at the test points gives the calibration.
* ``protein`` (protein_casp.csv, 45,730 x 9, target RMSD), ``kin40k`` (kin40k.csv, 40,000 x 8,
  target y), ``beijing`` (beijing_air_quality_pm25.csv, 412,029 rows; the 14 numeric columns year, month, day,
  hour, PM10, SO2, NO2, CO, O3, TEMP, PRES, DEWP, RAIN, WSPM, untransformed; the strings ``wd`` and
  ``station`` are dropped; rows without a target are dropped; missing features are imputed with the
  training median; a random row split. ``tutorials/explain_400k_rows.py`` makes the choices an
  explanation needs instead: no PM10 or day, log transforms, whole days held out).

``--check-exact`` adds, for GPX, a comparison on a 5,000-row training subset with the fitted
hyperparameters: the scalable prediction path forced (dense limits 0) against the exact Cholesky
path with the same base kernel, and against the Cholesky path with the method's exact base kernel
(the RBF inside the inducing-point / grid kernel), for up to 1,000 test points.

``--device cuda`` runs both models on a GPU (peak GPU memory is added to the notes, also in n² floats). An
exact GPX on 10⁵ rows there: ``--method exact --lean --weights-path solve --device cuda --dtype float32
--n 100000 --n-test 10000``: the fit runs CG over the lean kernel (nothing n x n), and the predictions use one
dense Cholesky factor built in place (40 GB) when it fits ``gpytorch_explain.settings.dense_memory_budget``
(half the free GPU memory by default), else CG. The path taken is printed and shown in the table.

Timings on a shared machine are noisy; run nothing else heavy alongside.

Usage (from the repository root; the package must be importable, e.g. ``pip install -e .`` or
``PYTHONPATH=.``)::

    python benchmarks/scale.py --dataset synthetic --n 10000 --method sgpr
    python benchmarks/scale.py --dataset synthetic --n 100000 --method sgpr --max-minutes 10
    python benchmarks/scale.py --dataset kin40k --method kissgp --only gpr
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import math
import multiprocessing as mp
import os
import resource
import signal
import time
import traceback
import warnings
from pathlib import Path

import gpytorch
import torch
from gpytorch import settings as gsettings
from gpytorch.kernels import (
    AdditiveStructureKernel,
    GridInterpolationKernel,
    InducingPointKernel,
    ProductStructureKernel,
    RBFKernel,
    ScaleKernel,
)

from gpytorch_explain import GPXModel, median_heuristic_lengthscale
from gpytorch_explain import settings as explain_settings
from gpytorch_explain.operators import GPXInducingLinearOperator

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO.parent / "shared" / "datasets"
FILES = {
    "protein": ("protein_casp.csv", "RMSD"),
    "kin40k": ("kin40k.csv", "y"),
    "beijing": ("beijing_air_quality_pm25.csv", "PM2.5"),
}
DENSE_LIMIT = 5000  # GPX's default dense limit, see gpytorch_explain.settings.max_cholesky_size


class BudgetExceeded(Exception):
    """Raised by the alarm when a fit runs past ``--max-minutes``."""


# ---------------------------------------------------------------------------------------------- data
def _read_csv(path: Path, target: str) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """Numeric feature columns (NaN where missing) and the target; rows without a target are dropped."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = list(reader)
    t_col = header.index(target)
    numeric = []
    for j in range(len(header)):
        if j == t_col:
            continue
        try:
            for r in rows[:2000]:
                if r[j] != "":
                    float(r[j])
            numeric.append(j)
        except ValueError:  # a string column (wd, station)
            continue
    keep = [r for r in rows if r[t_col] != ""]
    x = torch.tensor([[float(r[j]) if r[j] != "" else math.nan for j in numeric] for r in keep], dtype=torch.float64)
    y = torch.tensor([float(r[t_col]) for r in keep], dtype=torch.float64)
    return [header[j] for j in numeric], x, y


def _rff_weights(x: torch.Tensor, d: int, lengthscale: float, outputscale: float, gen, features: int = 1024):
    """``d`` independent GP(0, outputscale * RBF(lengthscale)) sample paths at ``x`` (random Fourier features)."""
    omega = torch.randn(features, x.size(-1), generator=gen, dtype=x.dtype) / lengthscale
    phase = 2 * math.pi * torch.rand(features, generator=gen, dtype=x.dtype)
    amp = torch.randn(features, d, generator=gen, dtype=x.dtype) * math.sqrt(2 * outputscale / features)
    out = torch.empty(x.size(0), d, dtype=x.dtype)
    for start in range(0, x.size(0), 50_000):
        sl = slice(start, start + 50_000)
        out[sl] = torch.cos(x[sl] @ omega.T + phase) @ amp
    return out


def load_data(args) -> dict:
    """Train/test split as float64 tensors: ``x``, ``y``, ``x_test``, ``y_test`` (and ``w_test`` if known)."""
    gen = torch.Generator().manual_seed(args.seed)
    if args.dataset == "synthetic":
        n = args.n or 100_000
        total = n + args.n_test
        x = torch.randn(total, args.dims, generator=gen, dtype=torch.float64)
        w = _rff_weights(x, args.dims, args.true_lengthscale, args.true_outputscale, gen)
        w = w + math.sqrt(args.true_weight_noise) * torch.randn(total, args.dims, generator=gen, dtype=torch.float64)
        y = (w * x).sum(-1) + math.sqrt(args.true_noise) * torch.randn(total, generator=gen, dtype=torch.float64)
        return {
            "x": x[:n],
            "y": y[:n],
            "x_test": x[n:],
            "y_test": y[n:],
            "w_test": w[n:],
            "names": [f"x{i}" for i in range(args.dims)],
            "info": f"synthetic GPX prior, D = d = {args.dims}, {n} train / {args.n_test} test",
        }
    fname, target = FILES[args.dataset]
    names, x, y = _read_csv(Path(args.data_dir) / fname, target)
    perm = torch.randperm(x.size(0), generator=gen)
    n_test = min(args.n_test, x.size(0) // 5)
    test, train = perm[:n_test], perm[n_test:]
    if args.n:
        train = train[: args.n]
    x_tr, x_te, y_tr, y_te = x[train], x[test], y[train], y[test]
    missing = int(torch.isnan(x_tr).any(-1).sum()) + int(torch.isnan(x_te).any(-1).sum())
    med = x_tr.nanmedian(dim=0).values
    x_tr = torch.where(torch.isnan(x_tr), med, x_tr)
    x_te = torch.where(torch.isnan(x_te), med, x_te)
    mu, sd = x_tr.mean(0), x_tr.std(0).clamp_min(1e-12)
    y_mu, y_sd = y_tr.mean(), y_tr.std()
    return {
        "x": (x_tr - mu) / sd,
        "y": (y_tr - y_mu) / y_sd,
        "x_test": (x_te - mu) / sd,
        "y_test": (y_te - y_mu) / y_sd,
        "names": names,
        "info": (
            f"{fname}: {x.size(0)} rows with a target, D = d = {x.size(1)} ({', '.join(names)}), "
            f"{x_tr.size(0)} train / {x_te.size(0)} test, {missing} rows with imputed features, "
            f"target sd {y_sd.item():.4g}"
        ),
    }


# ---------------------------------------------------------------------------------------------- kernels
def keops_available() -> bool:
    try:
        import pykeops  # noqa: F401
    except ImportError:
        return False
    return True


def make_kernel(args, x: torch.Tensor, likelihood) -> gpytorch.kernels.Kernel:
    """The method's kernel, initialised identically for GPX and the GPR (median-heuristic lengthscale)."""
    dims = x.size(-1)
    ell = median_heuristic_lengthscale(x).item()
    gen = torch.Generator().manual_seed(args.seed + 1)
    if args.method == "sgpr":
        rbf = RBFKernel(ard_num_dims=dims)
        rbf.lengthscale = ell
        inducing = x[torch.randperm(x.size(0), generator=gen)[: args.inducing]].clone()
        return InducingPointKernel(ScaleKernel(rbf), inducing_points=inducing, likelihood=likelihood)
    if args.method == "kissgp":
        structure = args.kiss_structure
        if structure == "auto":
            structure = "grid" if dims <= 3 else "additive"
        if structure == "grid":
            grid = args.grid_size or {1: 400, 2: 100, 3: 30}.get(dims, 16)
            rbf = RBFKernel(ard_num_dims=dims)
            rbf.lengthscale = ell
            return ScaleKernel(GridInterpolationKernel(rbf, grid_size=grid, num_dims=dims))
        grid = args.grid_size or 200
        rbf = RBFKernel()
        # a 1-D lengthscale on standardised data: the median heuristic in one dimension
        rbf.lengthscale = ell / math.sqrt(dims)
        inner = GridInterpolationKernel(rbf, grid_size=grid, num_dims=1)
        wrapper = AdditiveStructureKernel if structure == "additive" else ProductStructureKernel
        return ScaleKernel(wrapper(inner, num_dims=dims))
    if getattr(args, "lean", False):
        # memory-lean: products and backward in row blocks (KeOps inside when pykeops is importable)
        from gpytorch_explain.kernels import PartitionedKernel

        rbf = RBFKernel(ard_num_dims=dims)
        rbf.lengthscale = ell
        return PartitionedKernel(ScaleKernel(rbf))
    if keops_available():
        from gpytorch.kernels.keops import RBFKernel as KeOpsRBFKernel

        rbf = KeOpsRBFKernel(ard_num_dims=dims)
    else:
        rbf = RBFKernel(ard_num_dims=dims)
    rbf.lengthscale = ell
    return ScaleKernel(rbf)


def exact_counterpart(kernel: gpytorch.kernels.Kernel) -> gpytorch.kernels.Kernel | None:
    """The exact kernel that a scalable kernel approximates (same hyperparameters), or ``None``."""
    kernel = copy.deepcopy(kernel)
    if isinstance(kernel, InducingPointKernel):
        return kernel.base_kernel
    if isinstance(kernel, ScaleKernel) and isinstance(kernel.base_kernel, GridInterpolationKernel):
        kernel.base_kernel = kernel.base_kernel.base_kernel
        return kernel
    if isinstance(kernel, ScaleKernel) and isinstance(kernel.base_kernel, AdditiveStructureKernel):
        inner = kernel.base_kernel.base_kernel
        if isinstance(inner, GridInterpolationKernel):
            kernel.base_kernel = gpytorch.kernels.AdditiveKernel(
                *[RBFKernel(active_dims=[i]) for i in range(kernel.base_kernel.num_dims)]
            ).to(inner.base_kernel.lengthscale)
            for k in kernel.base_kernel.kernels:
                k.lengthscale = inner.base_kernel.lengthscale.detach()
            return kernel
    return None


def describe(kernel) -> str:
    """The fitted hyperparameters of a kernel, briefly."""
    parts = []
    for name, _ in kernel.named_parameters():
        if "inducing_points" in name:
            continue
        path = name.replace("raw_", "")
        obj = kernel
        for attr in path.split(".")[:-1]:
            obj = getattr(obj, attr)
        val = getattr(obj, path.split(".")[-1]).detach().reshape(-1)
        shown = ", ".join(f"{v:.3g}" for v in val[:4].tolist()) + (", ..." if val.numel() > 4 else "")
        parts.append(f"{path.replace('base_kernel.', '')}=[{shown}]")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------- models
class GPR(gpytorch.models.ExactGP):
    """Standard GPyTorch regression with a zero mean (the data are standardised)."""

    def __init__(self, x, y, likelihood, kernel):
        super().__init__(x, y, likelihood)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def fit_gpr(model: GPR, max_iter: int, tolerance: float | None = None) -> list[float]:
    """``GPXModel.fit``'s L-BFGS settings on ``ExactMarginalLogLikelihood`` (the loss per sample)."""
    if tolerance is None:  # GPXModel.fit's default
        tolerance = min(1e-5, 1e-2 / model.train_targets.size(-1))
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=tolerance,
        tolerance_change=tolerance,
        history_size=20,
        line_search_fn="strong_wolfe",
    )
    history: list[float] = []
    model.fit_history = history  # visible when the budget interrupts the fit
    x, y = model.train_inputs[0], model.train_targets

    def closure():
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        history.append(loss.item())
        return loss

    opt.step(closure)
    return history


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def _sync(device: torch.device) -> None:
    """Wait for queued GPU work, so that timings include it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _test_chunk(args, n: int) -> int:
    if args.test_chunk:
        return args.test_chunk
    # predict_weights forms the dense m x n cross-covariance (and per-chunk n x (chunk * d) work)
    return max(1, min(args.n_test, int(2**27 // max(n, 1))))


def _alarm(seconds: float):
    def handler(signum, frame):
        raise BudgetExceeded()

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))


def _cancel_alarm():
    signal.setitimer(signal.ITIMER_REAL, 0)


def run_model(which: str, args) -> dict:
    """Fit and evaluate one model (GPX or GPR); runs in its own process."""
    if args.max_gib:
        # address-space cap: an allocation past it raises instead of waking the OOM killer (torch's
        # virtual size exceeds its resident size by a few GiB, hence the margin)
        cap = int((args.max_gib + 4) * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    warnings.filterwarnings("ignore", message="CG terminated")
    warnings.filterwarnings("ignore", category=gpytorch.utils.warnings.NumericalWarning)
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    data = load_data(args)
    x, y = data["x"].to(device, dtype), data["y"].to(device, dtype)
    x_test, y_test = data["x_test"].to(device, dtype), data["y_test"].to(device, dtype)
    n = x.size(0)
    torch.manual_seed(args.seed)
    res = {"model": which, "n": n, "rss_data": _peak_rss_gib(), "notes": []}
    stopped = False

    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(device, dtype)
    likelihood.noise = 0.01 if which == "gpx" else 0.1
    kernel = make_kernel(args, x, likelihood).to(device, dtype)
    if which == "gpx":
        model = GPXModel(x, y, likelihood=likelihood, base_kernel=kernel)
    else:
        model = GPR(x, y, likelihood, kernel).to(device, dtype)

    t0 = time.perf_counter()
    warm_ctx = contextlib.ExitStack()  # settings of the warm start only (closed before the full fit, or on a stop)
    _alarm(60 * args.max_minutes)
    try:
        if args.warm_start and args.warm_start < n:
            # hyperparameters from a random subset first (the same kernel and likelihood modules, so the
            # full fit starts where the subset fit ended)
            sub = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + 2))[: args.warm_start]
            # --warm-cholesky: the subset's likelihood by Cholesky (exact log-determinant) for both models, instead of
            # CG/Lanczos estimates, which are noisy in float32
            dense_warm = len(sub) if args.warm_cholesky else None
            if dense_warm:
                warm_ctx.enter_context(explain_settings.max_cholesky_size(dense_warm))
                warm_ctx.enter_context(gsettings.max_cholesky_size(dense_warm))
            if which == "gpx":
                fit_kernel = kernel
                if args.exact_warm_start and isinstance(kernel, InducingPointKernel):
                    # the exact GPX likelihood (Cholesky) with the inducing kernel's own base kernel, which is the
                    # same module: no collapsed-bound bias (see README, "Hyperparameters at scale")
                    sub, fit_kernel = sub[: min(args.warm_start, DENSE_LIMIT)], kernel.base_kernel
                sub_model = GPXModel(x[sub], y[sub], likelihood=likelihood, base_kernel=fit_kernel)
                res["warm_how"] = " (exact likelihood)" if fit_kernel is not kernel else ""
                sub_model.fit(max_iter=args.max_iter, progress=args.progress)
                model.weight_noise = sub_model.weight_noise.detach()
                res["warm_evals"] = len(sub_model.fit_history)
            else:
                sub_model = GPR(x[sub], y[sub], likelihood, kernel).to(device, dtype)
                res["warm_evals"] = len(fit_gpr(sub_model, args.max_iter))
            warm_ctx.close()
            res["warm_rows"] = len(sub)
            if dense_warm:
                res["warm_how"] = res.get("warm_how", "") + " (Cholesky)"
            res["warm_s"] = time.perf_counter() - t0
            del sub_model
            model.train()
        full_iter = args.max_iter if args.full_iter is None else args.full_iter
        if full_iter == 0:  # keep the subset's hyperparameters; condition on all rows only
            history = []
        elif which == "gpx":
            model.fit(max_iter=full_iter, progress=args.progress)
            history = model.fit_history
        else:
            history = fit_gpr(model, full_iter)
    except BudgetExceeded:
        history = getattr(model, "fit_history", [])
        stopped = True
        res["notes"].append(f"fit stopped at the {args.max_minutes} min budget")
    finally:
        warm_ctx.close()
        _cancel_alarm()
    _sync(device)
    res["fit_s"] = time.perf_counter() - t0
    res["evals"] = len(history)
    if "warm_s" in res:
        res["notes"].append(
            f"warm start: {res['warm_evals']} evals on {res['warm_rows']} rows{res.get('warm_how', '')} in "
            f"{res['warm_s']:.1f} s, then "
            f"{len(history)} on all rows ({(res['fit_s'] - res['warm_s']) / max(len(history), 1):.1f} s each)"
        )
    elif history:
        res["notes"].append(f"{res['fit_s'] / len(history):.1f} s per evaluation")
    res["loss"] = history[-1] if history else math.nan
    res["rss_fit"] = _peak_rss_gib()
    model.eval()
    likelihood.eval()
    res["hypers"] = f"noise={likelihood.noise.item():.3g} " + (
        f"weight_noise={model.weight_noise.item():.3g} " if which == "gpx" else ""
    )
    res["hypers"] += describe(kernel)

    inducing = args.method == "sgpr"
    # GPX with a KISS-GP base works in the grid root's feature space (exact Woodbury) when the root is narrow enough
    grid_feats = (
        which == "gpx"
        and args.method == "kissgp"
        and isinstance(model.covar_module(model.train_inputs[0][:2]).evaluate_kernel(), GPXInducingLinearOperator)
    )
    # auto/solve: the library's default (fast_pred_var off): GPX's dense factor while it fits
    # gpytorch_explain.settings.dense_memory_budget, else exact CG solves; cg: CG even where the factor fits
    love = args.weights_path == "love"
    budget = 0 if args.weights_path == "cg" else explain_settings.dense_memory_budget.value()
    factor_types = []
    # GPX with inducing points (or grid features) predicts in feature space (nothing of size m x n): one call
    feature_space = which == "gpx" and (inducing or grid_feats) and n > DENSE_LIMIT
    chunk = args.n_test if feature_space else _test_chunk(args, n)
    means, stds, chunk_times = [], [], []
    t0 = time.perf_counter()
    _alarm(60 * args.max_minutes)
    try:
        skip_var = which == "gpr" and args.gpr_mean_only
        with (
            torch.no_grad(),
            gsettings.fast_pred_var(love),
            gsettings.skip_posterior_variances(skip_var),
            explain_settings.dense_memory_budget(budget),
        ):
            for start in range(0, x_test.size(0), chunk):
                tc = time.perf_counter()
                xc = x_test[start : start + chunk]
                if which == "gpx":
                    post = model.predict_weights(xc)
                    factor_types.append(getattr(post.lazy_covariance_matrix, "factor_type", None))
                    means.append(post.mean)
                    stds.append(post.variance.clamp_min(0).sqrt())
                else:
                    post = model(xc)
                    means.append(post.mean)
                    stds.append(torch.full_like(post.mean, math.nan) if skip_var else post.variance.clamp_min(0).sqrt())
                _sync(device)
                chunk_times.append(time.perf_counter() - tc)
    except BudgetExceeded:
        stopped = True
        res["notes"].append(f"prediction stopped at the {args.max_minutes} min budget")
    finally:
        _cancel_alarm()
    res["pred_s"] = time.perf_counter() - t0
    res["pred_first_chunk_s"] = chunk_times[0] if chunk_times else math.nan
    res["pred_points"] = sum(m.size(0) for m in means)
    path = prediction_path(which, n, factor_types, inducing, grid_feats, love)
    print(f"{which}: predictions through {path}", flush=True)
    res["pred_path"] = f"{path}, chunk {chunk}"
    res["rss_pred"] = _peak_rss_gib()
    if device.type == "cuda":
        peak_gpu = torch.cuda.max_memory_allocated(device)
        per_square = n * n * torch.finfo(dtype).bits // 8
        res["notes"].append(f"peak GPU memory {peak_gpu / 2**30:.2f} GiB ({peak_gpu / per_square:.2f} n^2 floats)")
    if means:
        mean, std = torch.cat(means), torch.cat(stds)
        m = mean.size(0)
        if which == "gpx":
            pred = (mean * x_test[:m]).sum(-1)
            if "w_test" in data:
                w_true = data["w_test"][:m].to(mean)
                inside = (w_true - mean).abs() <= 1.959964 * std
                res["coverage"] = inside.to(dtype).mean().item()
                res["coverage_by_feature"] = inside.to(dtype).mean(0).tolist()
                res["weight_rmse"] = (w_true - mean).pow(2).mean().sqrt().item()
        else:
            pred = mean
        res["rmse"] = (pred - y_test[:m]).pow(2).mean().sqrt().item()

    if which == "gpr" and args.attributions and not stopped:
        try:
            res["attributions"] = attribution_check(model, x_test[: args.attributions])
        except Exception as exc:
            res["attributions"] = f"error: {type(exc).__name__}: {exc}"
    if which == "gpx" and args.check_exact and not stopped:
        try:
            res["exact_check"] = check_exact(model, x, y, x_test, args, love)
        except Exception as exc:  # report, do not lose the main numbers
            res["exact_check"] = {"error": f"{type(exc).__name__}: {exc}"}
    return res


def prediction_path(which: str, n: int, factor_types: list, inducing: bool, grid_feats: bool, love: bool) -> str:
    """The path the predictions took: for GPX the weight covariance's factor type as the library chose it."""
    if which == "gpx":
        if factor_types and factor_types[0] is not None:
            kind = factor_types[0]
            if kind == "cholesky":
                return "Cholesky" if n <= DENSE_LIMIT else "dense Cholesky (fits dense_memory_budget)"
            return {"solve": "CG solve (exact)", "root": "LOVE"}.get(kind, kind)
        if grid_feats:
            return "grid features (exact)"
        return "inducing space (exact)" if inducing else "unknown"
    if inducing:
        return "SGPR"
    if n <= gsettings.max_cholesky_size.value():
        return "Cholesky"
    return "LOVE" if love else "CG solve"


def attribution_check(model, x_test) -> str:
    """IG attribution GPs (means and per-point covariance blocks) of the trained GPR at ``x_test``."""
    from gpytorch_explain import PosteriorIntegratedGradients

    ig = PosteriorIntegratedGradients(model)
    t0 = time.perf_counter()
    with torch.no_grad():
        post = ig(x_test)
        std = post.variance.clamp_min(0).sqrt()
        blocks = post.lazy_covariance_matrix.point_blocks()
    elapsed = time.perf_counter() - t0
    with torch.no_grad():
        gaps = ig.completeness(x_test)
    scale = post.mean.abs().sum(-1).clamp_min(1e-12)
    mean_gap = (gaps.mean_gap.abs() / scale).max().item()
    var_gap = gaps.variance_gap.abs().max().item()
    return (
        f"IG means + {blocks.size(-1)}x{blocks.size(-1)} covariance blocks at {x_test.size(0)} points in "
        f"{elapsed:.1f} s (median std {std.median().item():.3g}); completeness: max |mean gap| / sum|IG| "
        f"{mean_gap:.1e}, max |variance gap| {var_gap:.1e}"
    )


def _compare(mean, std, ref_mean, ref_std) -> str:
    mean_err = ((mean - ref_mean).norm() / ref_mean.norm()).item()
    rel = ((std - ref_std).abs() / ref_std.clamp_min(1e-12)).reshape(-1)
    return (
        f"mean rel. error {mean_err:.2%} (target <= 1%), std rel. error median {rel.median().item():.2%} "
        f"max {rel.max().item():.2%} (target <= 5%)"
    )


def check_exact(model: GPXModel, x, y, x_test, args, love: bool) -> dict:
    """Weights on a 5,000-row subset: the scalable path against exact Cholesky (same hyperparameters)."""
    sub = min(DENSE_LIMIT, x.size(0))
    xs, ys, xt = x[:sub], y[:sub], x_test[:1000]
    base = copy.deepcopy(model.base_kernel)
    if isinstance(base, InducingPointKernel):
        base._clear_cache()

    def weights(kernel, dense_limit: int | None):
        lik = copy.deepcopy(model.likelihood)
        sub_model = GPXModel(xs, ys, likelihood=lik, base_kernel=kernel)
        sub_model.weight_noise = model.weight_noise.detach()
        sub_model.eval()
        limit = dense_limit if dense_limit is not None else gsettings.max_cholesky_size.value()
        t0 = time.perf_counter()
        with (
            torch.no_grad(),
            gsettings.fast_pred_var(love),
            gsettings.max_cholesky_size(min(limit, gsettings.max_cholesky_size.value())),
            explain_settings.max_cholesky_size(limit if dense_limit is not None else DENSE_LIMIT),
        ):
            post = sub_model.predict_weights(xt)
            out = post.mean, post.variance.clamp_min(0).sqrt()
        return out, time.perf_counter() - t0

    (ref_mean, ref_std), t_ref = weights(copy.deepcopy(base), None)
    (s_mean, s_std), t_s = weights(copy.deepcopy(base), 0)
    out = {
        "subset": f"{sub} train rows, {xt.size(0)} test points",
        "scalable_vs_cholesky": f"{_compare(s_mean, s_std, ref_mean, ref_std)}; {t_s:.1f} s vs {t_ref:.1f} s",
    }
    exact = exact_counterpart(base)
    if exact is not None:
        (e_mean, e_std), t_e = weights(exact, None)
        out["method_vs_exact_kernel"] = f"{_compare(ref_mean, ref_std, e_mean, e_std)}; exact kernel {t_e:.1f} s"
    return out


def _child(which: str, args, conn) -> None:
    try:
        block = args.block_elements or explain_settings.max_block_elements.value()
        with explain_settings.max_block_elements(block):
            conn.send(run_model(which, args))
    except BaseException as exc:  # report to the parent
        conn.send({"model": which, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
    finally:
        conn.close()


def run_in_process(which: str, args) -> dict:
    """Run one model in a spawned process; kill it past the hard limit (2 x --max-minutes + 5 min)."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(which, args, send))
    proc.start()
    send.close()
    hard = 60 * (2 * args.max_minutes + 5)
    result = None
    try:
        if recv.poll(hard):
            try:
                result = recv.recv()
            except EOFError:
                result = None
        proc.join(timeout=30)
    finally:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
    if result is None:
        reason = f"killed after {hard / 60:.0f} min" if proc.exitcode in (None, -9) else f"exit code {proc.exitcode}"
        result = {"model": which, "error": reason}
    return result


# ---------------------------------------------------------------------------------------------- report
def _fmt(value, spec: str = ".3f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(value, spec)


def report(args, info: str, results: list[dict]) -> None:
    print(f"\n{info}")
    print(
        f"method {args.method}, dtype {args.dtype}, max_iter {args.max_iter}, budget {args.max_minutes} min per phase, "
        f"torch {torch.__version__}, gpytorch {gpytorch.__version__}, {args.threads or os.cpu_count()} threads, "
        f"pykeops {'yes' if keops_available() else 'no'}, max_block_elements "
        f"{args.block_elements or explain_settings.max_block_elements.value()}"
    )
    print(
        "\n| model | n | fit s | evals | final loss | RMSE | weights/pred s (first chunk) | points | path "
        "| peak RSS GiB (data/fit/pred) | 95% coverage | notes |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |")
    for r in results:
        if "error" in r:
            print(f"| {r['model']} | | | | | | | | | | | error: {r['error']} |")
            continue
        cov = r.get("coverage")
        print(
            f"| {r['model']} | {r['n']} | {_fmt(r['fit_s'], '.1f')} | {r['evals']} | {_fmt(r['loss'], '.4f')} "
            f"| {_fmt(r.get('rmse'), '.4f')} | {_fmt(r['pred_s'], '.1f')} ({_fmt(r['pred_first_chunk_s'], '.1f')}) "
            f"| {r['pred_points']} | {r['pred_path']} "
            f"| {r['rss_data']:.2f}/{r['rss_fit']:.2f}/{r['rss_pred']:.2f} | {_fmt(cov, '.3f')} "
            f"| {'; '.join(r['notes'])} |"
        )
    by_model = {r["model"]: r for r in results if "error" not in r}
    for r in results:
        if "error" in r and "trace" in r:
            print(f"\n{r['model']} failed:\n{r['trace']}")
    for r in by_model.values():
        print(f"\n{r['model']} hyperparameters: {r['hypers']}")
        if "coverage_by_feature" in r:
            by_feat = ", ".join(f"{c:.3f}" for c in r["coverage_by_feature"])
            rmse = r["weight_rmse"]
            print(f"{r['model']} weights: RMSE to the true weights {rmse:.4f}, coverage by feature {by_feat}")
        if "attributions" in r:
            print(f"{r['model']} attribution GPs: {r['attributions']}")
        if "exact_check" in r:
            for key, value in r["exact_check"].items():
                print(f"{r['model']} exactness check, {key}: {value}")
    gpx, gpr = by_model.get("gpx"), by_model.get("gpr")
    print("\nchecks against the issue-4 targets:")
    if gpx:
        print(f"  GPX fit {gpx['fit_s'] / 60:.1f} min (target <= 10 min at n = 1e5)")
        per_10k = gpx["pred_s"] * 10_000 / max(gpx["pred_points"], 1)
        print(f"  weights mean + std, scaled to 10,000 points: {per_10k:.1f} s (target <= 60 s)")
        print(f"  peak RSS {max(gpx['rss_fit'], gpx['rss_pred']):.2f} GiB (target <= 8 GiB)")
        if "coverage" in gpx:
            print(f"  95% weight-interval coverage {gpx['coverage']:.3f} (target 0.92-0.98)")
    if gpx and gpr and "rmse" in gpx and "rmse" in gpr:
        print(f"  RMSE GPX / GPR = {gpx['rmse'] / gpr['rmse']:.3f} (target <= 1.05)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=["synthetic", "protein", "kin40k", "beijing"], default="synthetic")
    parser.add_argument("--n", type=int, default=None, help="training rows (default: 1e5 synthetic, all real rows)")
    parser.add_argument("--n-test", type=int, default=10_000, help="test points (real data: at most 20%% of rows)")
    parser.add_argument("--method", choices=["sgpr", "kissgp", "exact"], default="sgpr")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    parser.add_argument("--max-minutes", type=float, default=10.0, help="budget for each fit and each prediction")
    parser.add_argument(
        "--max-gib", type=float, default=16.0, help="memory cap per model process (RLIMIT_AS - 4 GiB); 0: none"
    )
    parser.add_argument("--max-iter", type=int, default=100, help="L-BFGS iterations (objective evaluations)")
    parser.add_argument(
        "--warm-start", type=int, default=0, help="fit on this many random rows first, then on all rows (0: off)"
    )
    parser.add_argument(
        "--full-iter", type=int, default=None, help="L-BFGS iterations on all rows (default: --max-iter)"
    )
    parser.add_argument("--only", choices=["gpx", "gpr"], default=None, help="run one of the two models")
    parser.add_argument("--inducing", type=int, default=256, help="sgpr: number of inducing points")
    parser.add_argument("--grid-size", type=int, default=None, help="kissgp: grid points per dimension")
    parser.add_argument("--kiss-structure", choices=["auto", "grid", "additive", "product"], default="auto")
    parser.add_argument(
        "--weights-path",
        choices=["auto", "love", "solve", "cg"],
        default="auto",
        help="posterior variances. auto and solve: the library's default (exact: GPX's dense factor where it fits "
        "gpytorch_explain.settings.dense_memory_budget, else CG solves); love: LOVE (fast_pred_var); cg: GPX's CG "
        "solves even where the dense factor fits (dense_memory_budget(0))",
    )
    parser.add_argument("--test-chunk", type=int, default=None, help="test points per predict_weights call")
    parser.add_argument("--check-exact", action="store_true", help="GPX: scalable vs Cholesky on 5,000 rows")
    parser.add_argument(
        "--warm-cholesky",
        action="store_true",
        help="both models: fit the warm start's likelihood by Cholesky on its rows (exact log-determinant)",
    )
    parser.add_argument(
        "--exact-warm-start",
        action="store_true",
        help="GPX with sgpr: fit the warm start by the exact likelihood on min(--warm-start, 5000) rows",
    )
    parser.add_argument(
        "--gpr-mean-only",
        action="store_true",
        help="GPR: predictive means only (gpytorch.settings.skip_posterior_variances); GPyTorch's SGPR strategy "
        "still builds its covariance cache",
    )
    parser.add_argument(
        "--attributions", type=int, default=0, help="GPR: IG attribution GPs at this many test points (0: off)"
    )
    parser.add_argument("--max-dense-n", type=int, default=20_000, help="exact without pykeops: largest n")
    parser.add_argument(
        "--lean",
        action="store_true",
        help="exact: wrap the kernel in gpytorch_explain.kernels.PartitionedKernel (never stores n x n)",
    )
    parser.add_argument(
        "--block-elements",
        type=int,
        default=None,
        help="gpytorch_explain.settings.max_block_elements for both models (default: the library's, 2^24); larger "
        "blocks are faster on a GPU",
    )
    parser.add_argument("--dims", type=int, default=3, help="synthetic: D = d")
    parser.add_argument("--true-lengthscale", type=float, default=1.0)
    parser.add_argument("--true-outputscale", type=float, default=1.0)
    parser.add_argument("--true-weight-noise", type=float, default=0.01)
    parser.add_argument("--true-noise", type=float, default=0.01)
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--device", default="cpu", help="torch device for both models, e.g. cuda")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true", help="show GPX's fit progress bar")
    return parser


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main():
    args = build_parser().parse_args()
    signal.signal(signal.SIGTERM, _terminate)  # so that run_in_process can stop its child

    data = load_data(args)
    info = data["info"]
    n = data["x"].size(0)
    del data
    if args.method == "exact" and not getattr(args, "lean", False) and not keops_available() and n > args.max_dense_n:
        raise SystemExit(
            f"--method exact without pykeops forms the dense {n} x {n} kernel ({8 * n * n / 2**30:.0f} GiB); "
            f"use --n <= {args.max_dense_n} or install pykeops."
        )
    results = [run_in_process(which, args) for which in ("gpx", "gpr") if args.only in (None, which)]
    report(args, info, results)


if __name__ == "__main__":
    main()
