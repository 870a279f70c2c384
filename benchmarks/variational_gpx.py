#!/usr/bin/env python3
"""Variational GPX on Beijing PM2.5 (412k rows) with minibatches, next to exact GPX on a subset and SVGP regression.

Three models, each fitted in its own spawned process (so that the peak resident memory, ``ru_maxrss``, is measured
per model):

* ``VariationalGPXModel`` (``gpytorch_explain``): GPX with ``M`` shared inducing points, minibatch Adam on the tight
  ``GPXVariationalELBO`` (``model.fit``), ``z = x``;
* ``SVGP``: a standard GPyTorch ``ApproximateGP`` regression (``VariationalStrategy`` +
  ``CholeskyVariationalDistribution``, ``ConstantMean``, ``ScaleKernel(RBFKernel(ard))``, ``GaussianLikelihood``),
  the same inducing initialisation, the same epochs, batch size and Adam step size, GPyTorch's ``VariationalELBO``;
* ``GPXModel`` (exact GPX, Cholesky) on a random ``--subset`` of the training rows, ``model.fit()`` (L-BFGS).

Data (``--data``, default ``<repo>/../shared/datasets/beijing_air_quality_pm25.csv``; see PROVENANCE.md there):
the UCI Beijing multi-site air-quality data, 12 stations, hourly, target ``PM2.5`` (µg/m³). Features, all
standardised with the training split's statistics:

* ``year, month, day, hour, TEMP, PRES, DEWP, RAIN, WSPM`` and the wind direction ``wd`` (16 compass points) as
  ``wd_sin, wd_cos`` of its angle (d = 11);
* with ``--pollutants`` also the co-pollutants ``PM10, SO2, NO2, CO, O3`` (d = 16). They are off by default:
  PM10 nearly determines PM2.5 (PROVENANCE.md suggests dropping them for a harder task).

``station`` (a string) is dropped. Rows with a missing feature are dropped (the data file already has no rows
without a target). The target is ``log1p(PM2.5)``, standardised; the RMSE is reported in these standardised units
and, after back-transforming the predictive mean (``expm1``, i.e. the predictive median), in µg/m³.
The split is a random 90/10 split. The rows are hourly time series, so a random split (with
``year, month, day, hour`` as features) lets the models interpolate between neighbouring hours and overstates
accuracy against a forecasting split; it is the same split for all three models.

Reported per model: the test RMSE on the full 10% test split, the training time, the time of the local-weight
posterior (``predict_weights(x)``: mean and std of every weight) at ``--n-weights`` test points (for SVGP, which has
no weights: the predictive mean and std), the peak RSS of its process, and one explained test prediction
(contributions ± std, largest first) for the two GPX models.

Cost of the variational GPX: with a joint ``q`` (``--q cholesky``) the ELBO costs ``O(B (dM)^2)`` per minibatch of
``B`` and ``S = L L^T`` costs ``O((dM)^3)`` per step; ``--q independent`` (one ``M x M`` block per latent) costs
``O(B d M^2)``. The default is the joint ``q`` with ``M = 64`` (dM = 704).

Usage (from the repository root, with the package importable, e.g. ``PYTHONPATH=.``)::

    python benchmarks/variational_gpx.py --rows 20000 --epochs 2            # quick check
    python benchmarks/variational_gpx.py --epochs 3 --threads 2              # all rows

Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import multiprocessing as mp
import os
import pathlib
import platform
import resource
import sys
import time

import numpy as np

DEFAULT_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "datasets" / "beijing_air_quality_pm25.csv"
BASE_FEATURES = ["year", "month", "day", "hour", "TEMP", "PRES", "DEWP", "RAIN", "WSPM"]
POLLUTANTS = ["PM10", "SO2", "NO2", "CO", "O3"]
TARGET = "PM2.5"
COMPASS = ["N", "NNE", "NE", "ENE", "E", "ESE", "SE", "SSE", "S", "SSW", "SW", "WSW", "W", "WNW", "NW", "NNW"]


# ---------------------------------------------------------------------------------------------- data
def read_csv(path: pathlib.Path, pollutants: bool) -> tuple[list[str], np.ndarray, np.ndarray, dict]:
    """Features (float64, NaN where missing), raw target PM2.5 and counts."""
    numeric = BASE_FEATURES + (POLLUTANTS if pollutants else [])
    angle = {name: 2 * math.pi * i / len(COMPASS) for i, name in enumerate(COMPASS)}
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        col = {name: i for i, name in enumerate(header)}
        missing_cols = [c for c in [*numeric, "wd", TARGET] if c not in col]
        if missing_cols:
            raise SystemExit(f"{path}: missing columns {missing_cols}; header is {header}")
        idx = [col[c] for c in numeric]
        i_wd, i_y = col["wd"], col[TARGET]
        rows_x, rows_y = [], []
        for row in reader:
            vals = [float(row[i]) if row[i] != "" else math.nan for i in idx]
            a = angle.get(row[i_wd], math.nan)
            vals += [math.sin(a), math.cos(a)]
            rows_x.append(vals)
            rows_y.append(float(row[i_y]) if row[i_y] != "" else math.nan)
    x = np.asarray(rows_x, dtype=np.float64)
    y = np.asarray(rows_y, dtype=np.float64)
    keep = np.isfinite(x).all(1) & np.isfinite(y)
    info = {"rows_in_file": int(x.shape[0]), "rows_dropped": int((~keep).sum())}
    return [*numeric, "wd_sin", "wd_cos"], x[keep], y[keep], info


def load_data(args) -> dict:
    """Random 90/10 split, standardised features and standardised log1p target (float64 numpy arrays)."""
    names, x, y_raw, info = read_csv(pathlib.Path(args.data), args.pollutants)
    rng = np.random.default_rng(args.seed)
    perm = rng.permutation(x.shape[0])
    if args.rows:
        perm = perm[: args.rows]
    n_test = max(1, len(perm) // 10)
    test, train = perm[:n_test], perm[n_test:]
    mu, sd = x[train].mean(0), x[train].std(0)
    sd[sd < 1e-12] = 1.0
    y_log = np.log1p(y_raw)
    y_mu, y_sd = y_log[train].mean(), y_log[train].std()
    return {
        "names": names,
        "x": (x[train] - mu) / sd,
        "y": (y_log[train] - y_mu) / y_sd,
        "x_test": (x[test] - mu) / sd,
        "y_test": (y_log[test] - y_mu) / y_sd,
        "y_test_raw": y_raw[test],
        "y_mu": float(y_mu),
        "y_sd": float(y_sd),
        "info": {**info, "rows_used": len(perm), "train": len(train), "test": len(test)},
    }


def kmeans(x, k: int, iters: int, sample: int, seed: int):
    """Lloyd's k-means on a random sample of rows (torch), initialised at random rows."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    pts = x[torch.randperm(x.size(0), generator=gen)[: min(sample, x.size(0))]]
    centres = pts[torch.randperm(pts.size(0), generator=gen)[:k]].clone()
    for _ in range(iters):
        assign = torch.cdist(pts, centres).argmin(1)
        for j in range(k):
            members = pts[assign == j]
            if members.size(0):
                centres[j] = members.mean(0)
    return centres


# ---------------------------------------------------------------------------------------------- workers
def _rss_mib() -> float:
    """Peak resident set size of this process in MiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if platform.system() == "Darwin" else peak / 1024


def _rmse(pred_std_units: np.ndarray, data: dict) -> tuple[float, float]:
    std_rmse = float(np.sqrt(np.mean((pred_std_units - data["y_test"]) ** 2)))
    pm = np.expm1(pred_std_units * data["y_sd"] + data["y_mu"])
    return std_rmse, float(np.sqrt(np.mean((pm - data["y_test_raw"]) ** 2)))


def _predict_chunked(fn, x, chunk: int = 10_000) -> np.ndarray:
    import torch

    with torch.no_grad():
        return torch.cat([fn(x[i : i + chunk]) for i in range(0, x.size(0), chunk)]).numpy()


def _time_weights(model, x) -> float:
    import torch

    with torch.no_grad():
        start = time.perf_counter()
        weights = model.predict_weights(x)
        mean, std = weights.mean, weights.variance.clamp_min(0).sqrt()
        assert mean.shape == std.shape == (x.size(0), model.num_features)
        return time.perf_counter() - start


def worker(kind: str, args, queue) -> None:
    """Load the data, fit one model, evaluate it and put a result dict on ``queue``."""
    import gpytorch
    import torch

    torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    data = load_data(args)
    x = torch.as_tensor(data["x"], dtype=dtype)
    y = torch.as_tensor(data["y"], dtype=dtype)
    x_test = torch.as_tensor(data["x_test"], dtype=dtype)
    x_w = x_test[: args.n_weights]
    rss_data = _rss_mib()
    out = {"kind": kind, "rss_after_data_mib": rss_data, "info": data["info"], "names": data["names"]}
    torch.manual_seed(args.seed)

    if kind in ("vgpx", "svgp"):
        inducing = kmeans(x, args.inducing, iters=10, sample=20_000, seed=args.seed)
        gen = torch.Generator().manual_seed(args.seed + 7)
        if kind == "vgpx":
            from gpytorch_explain import VariationalGPXModel

            model = VariationalGPXModel(inducing, variational_distribution=args.q, feature_names=data["names"])
            start = time.perf_counter()
            model.fit(x, y, num_epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, generator=gen)
            out["fit_s"] = time.perf_counter() - start
            out["history"] = [round(v, 4) for v in model.fit_history]
            out["hypers"] = (
                f"outputscale {model.base_kernel.outputscale.item():.3g}, lengthscale "
                f"{model.base_kernel.base_kernel.lengthscale.item():.3g}, sigma_w^2 {model.weight_noise.item():.3g}, "
                f"sigma_y^2 {model.likelihood.noise.item():.3g}"
            )
            pred = _predict_chunked(lambda t: model(t).mean, x_test)
            out["weights_s"] = _time_weights(model, x_w)
            with torch.no_grad():
                start = time.perf_counter()
                model.weight_blocks(x_w)
                out["blocks_s"] = time.perf_counter() - start
                out["explain"] = model.explain(x_test[:1]).summary(0, top_k=args.top_k)
        else:
            model, likelihood = make_svgp(inducing)
            start = time.perf_counter()
            out["history"] = train_svgp(model, likelihood, x, y, args, gen)
            out["fit_s"] = time.perf_counter() - start
            rbf = model.covar_module.base_kernel
            out["hypers"] = (
                f"outputscale {model.covar_module.outputscale.item():.3g}, lengthscales "
                f"{', '.join(f'{v:.3g}' for v in rbf.lengthscale.flatten().tolist())}, "
                f"sigma_y^2 {likelihood.noise.item():.3g}"
            )
            pred = _predict_chunked(lambda t: model(t).mean, x_test)
            with torch.no_grad():
                start = time.perf_counter()
                post = likelihood(model(x_w))
                post.mean, post.variance.sqrt()
                out["weights_s"] = time.perf_counter() - start
    else:
        from gpytorch_explain import GPXModel

        gen = torch.Generator().manual_seed(args.seed + 3)
        sub = torch.randperm(x.size(0), generator=gen)[: args.subset]
        model = GPXModel(x[sub], y[sub], feature_names=data["names"])
        start = time.perf_counter()
        model.fit(max_iter=args.exact_iter)
        out["fit_s"] = time.perf_counter() - start
        out["history"] = [round(model.fit_history[0], 4), "...", round(model.fit_history[-1], 4)]
        out["hypers"] = (
            f"outputscale {model.base_kernel.outputscale.item():.3g}, lengthscale "
            f"{model.base_kernel.base_kernel.lengthscale.item():.3g}, sigma_w^2 {model.weight_noise.item():.3g}, "
            f"sigma_y^2 {model.likelihood.noise.item():.3g}, {len(model.fit_history)} evaluations"
        )
        with gpytorch.settings.skip_posterior_variances(True):
            pred = _predict_chunked(lambda t: model(t).mean, x_test)
        out["weights_s"] = _time_weights(model, x_w)
        with torch.no_grad():
            out["explain"] = model.explain(x_test[:1]).summary(0, top_k=args.top_k)

    out["rmse_std"], out["rmse_pm"] = _rmse(pred, data)
    out["rss_mib"] = _rss_mib()
    queue.put(out)


def make_svgp(inducing):
    """A standard GPyTorch SVGP regression model and its Gaussian likelihood."""
    import gpytorch
    from gpytorch.variational import CholeskyVariationalDistribution, VariationalStrategy

    from gpytorch_explain.utils import median_heuristic_lengthscale

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, points):
            dist = CholeskyVariationalDistribution(points.size(0))
            super().__init__(VariationalStrategy(self, points, dist, learn_inducing_locations=True))
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=points.size(-1)))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = SVGP(inducing).to(inducing.dtype)
    model.covar_module.outputscale = 1.0
    model.covar_module.base_kernel.lengthscale = median_heuristic_lengthscale(inducing).item()
    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(inducing.dtype)
    likelihood.noise = 0.01
    return model, likelihood


def train_svgp(model, likelihood, x, y, args, gen) -> list[float]:
    """Minibatch Adam on GPyTorch's ``VariationalELBO``; returns the mean loss of each epoch."""
    import gpytorch
    import torch

    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, generator=gen
    )
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=x.size(0))
    opt = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=args.lr)
    model.train()
    likelihood.train()
    history = []
    for _ in range(args.epochs):
        total = 0.0
        for xb, yb in loader:
            opt.zero_grad()
            loss = -mll(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * yb.size(0)
        history.append(round(total / x.size(0), 4))
    model.eval()
    likelihood.eval()
    return history


def run_isolated(kind: str, args) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=worker, args=(kind, args, queue))
    proc.start()
    try:
        result = queue.get(timeout=args.timeout)
    except Exception as err:  # noqa: BLE001 - report and continue with the other models
        result = {"kind": kind, "error": f"{type(err).__name__}: {err} (exit code {proc.exitcode})"}
    proc.join(timeout=30)
    if proc.is_alive():
        proc.terminate()
    return result


# ---------------------------------------------------------------------------------------------- main
LABELS = {
    "vgpx": "VariationalGPX",
    "svgp": "SVGP (GPyTorch)",
    "exact": "exact GPX (subset)",
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="path of beijing_air_quality_pm25.csv")
    parser.add_argument("--rows", type=int, default=None, help="use a random subset of rows (default: all)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of VariationalGPX and SVGP")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=0.01, help="Adam step size of VariationalGPX and SVGP")
    parser.add_argument("--inducing", type=int, default=64, help="M, inducing points (k-means centres)")
    parser.add_argument(
        "--q", choices=["cholesky", "independent", "meanfield"], default="cholesky", help="q of VariationalGPX"
    )
    parser.add_argument("--subset", type=int, default=3000, help="training rows of the exact GPX")
    parser.add_argument("--exact-iter", type=int, default=100, help="L-BFGS iterations of the exact GPX")
    parser.add_argument("--n-weights", type=int, default=10_000, help="test points for the predict_weights timing")
    parser.add_argument("--pollutants", action="store_true", help="also use PM10, SO2, NO2, CO, O3 as features")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--models", default="vgpx,svgp,exact", help="comma-separated subset of vgpx,svgp,exact")
    parser.add_argument("--top-k", type=int, default=6, help="features shown in the explained prediction")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads per model process")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed per model")
    args = parser.parse_args(argv)

    cmd = " ".join(["python", *[a if " " not in a else repr(a) for a in sys.argv]])
    print(f"# command: {cmd}   (run {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')})")
    import gpytorch
    import torch

    print(
        f"# torch {torch.__version__}, gpytorch {gpytorch.__version__}, {os.cpu_count()} CPUs, "
        f"{args.threads} threads per model, {args.dtype}"
    )
    results = []
    for kind in [k.strip() for k in args.models.split(",") if k.strip()]:
        print(f"\n## {LABELS[kind]}", flush=True)
        res = run_isolated(kind, args)
        results.append(res)
        if "error" in res:
            print(f"FAILED: {res['error']}", flush=True)
            continue
        info = res["info"]
        print(
            f"data: {info['rows_in_file']} rows, {info['rows_dropped']} dropped (missing feature), "
            f"{info['rows_used']} used: {info['train']} train / {info['test']} test; "
            f"d = {len(res['names'])} ({', '.join(res['names'])})"
        )
        print(f"loss per epoch/evaluation: {res['history']}")
        print(f"hyperparameters: {res['hypers']}")
        if "blocks_s" in res:
            print(f"weight_blocks (per-point d x d blocks) at {args.n_weights} points: {res['blocks_s']:.2f} s")
        if "explain" in res:
            print("explained test point 0 (standardised log1p PM2.5; contributions on the latent scale):")
            print(res["explain"])
        sys.stdout.flush()

    d = len(results[0].get("names", [])) if results else 0
    base_rss = ", ".join(f"{r['rss_after_data_mib']:.0f}" for r in results if "rss_mib" in r)
    print("\n## Summary\n")
    print(
        f"Target log1p(PM2.5) standardised; RMSE on the full test split; M = {args.inducing}, "
        f"{args.epochs} epochs, batch {args.batch_size}, Adam lr {args.lr}, VariationalGPX q = {args.q} "
        f"(dM = {d * args.inducing}); exact GPX on {args.subset} rows. 'weights' = predict_weights mean+std at "
        f"{args.n_weights} test points (SVGP: predictive mean+std). RSS = peak of the model's own process "
        f"(after loading the data: {base_rss} MiB).\n"
    )
    print(
        "| model | train rows | test RMSE (std. log) | test RMSE (µg/m³) | fit time (s) | weights (s) "
        "| peak RSS (MiB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for res in results:
        label = LABELS[res["kind"]]
        if "error" in res:
            print(f"| {label} | – | failed | failed | – | – | – |")
            continue
        rows = args.subset if res["kind"] == "exact" else res["info"]["train"]
        print(
            f"| {label} | {min(rows, res['info']['train'])} | {res['rmse_std']:.4f} | {res['rmse_pm']:.2f} | "
            f"{res['fit_s']:.1f} | {res['weights_s']:.2f} | {res['rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
