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
# # Explaining 400,000 rows: GPX with inducing points on the Beijing PM2.5 data
#
# This is the end-to-end version of the scale tutorial: `GPXModel` with an `InducingPointKernel` base kernel,
# fitted on a subset and conditioned on all 371,000 training rows of the UCI Beijing multi-site air-quality
# data (412,029 hourly rows), then global importance with joint-posterior uncertainty, individual explanations
# with $\pm 1$ std error bars, and checks of the uncertainty. The module docstring in the next cell explains
# every step and every choice.
#
# The data file `beijing_air_quality_pm25.csv` is read from `GPYTORCH_EXPLAIN_DATA_DIR` (default
# `../shared/datasets` next to the repository); nothing is downloaded. With `GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1`
# it runs on 3,000 generated Beijing-like rows instead, with small settings (this is what the test suite and
# the documentation run). Figures go to `GPYTORCH_EXPLAIN_TUTORIAL_OUT` (default `tutorials/_output/`). Run
# as a script, it also takes command-line options (`--help`), which override the environment.

# %%
r"""Explaining 400,000 rows: GPX with inducing points on the Beijing PM2.5 data, end to end.

GPX (``GPXModel``) predicts every sample with a local linear model whose weights are Gaussian processes,
``y_i = w(x_i)ᵀ z_i + noise``, and returns the posterior of those weights, so each prediction comes with
per-feature contributions ``w ⊙ z`` and their standard deviations. With an ``InducingPointKernel`` as the
base kernel, the model is solved exactly in *inducing space*: one pass over the rows builds a
``dM × dM`` matrix (``d`` features, ``M`` inducing points), and everything after that (predictions,
weight posteriors, explanations) costs nothing per training row. This tutorial uses that to explain the
whole UCI Beijing multi-site air-quality data set (412,029 hourly rows from 12 stations, 2013-2017).

Step 1: load and clean. The file (``beijing_air_quality_pm25.csv`` in ``--data-dir``, by default
``../shared/datasets`` next to the repository; see its PROVENANCE.md; nothing is downloaded) has 14
numeric columns, the strings ``wd`` (wind direction) and ``station``, and the target ``PM2.5`` (µg/m³).
We keep the numeric columns, drop rows without a target, and fill missing feature values with the
training split's median. Four decisions matter for an explanation model:

* **PM10 is left out.** PM2.5 (particles up to 2.5 µm) is part of PM10 (up to 10 µm), measured at the
  same station in the same hour; the median ratio PM2.5/PM10 is about 0.8 and the correlation of their
  logs about 0.88. With PM10 as a feature the model learns "PM2.5 ≈ 0.8 · PM10", which is accurate and
  explains nothing: every explanation would say that fine dust is high because dust is high, and the
  feature is not available in any setting where PM2.5 itself is unknown. The gases (SO2, NO2, CO, O3)
  are kept: they are different pollutants, and CO and NO2 mark combustion and traffic, which is the
  kind of story an explanation should be able to tell. ``--keep PM10`` puts PM10 back for comparison.
* **The day of the month is left out** too. It is a calendar artefact: together with year and month it
  pins down the date, and since pollution episodes last several days, its "effect" would be the
  episode in the neighbouring (training) days, an explanation like "high because it is the 4th". A
  trial run with it gave it a larger share of the importance than the hour of day. Year (the long-term
  trend), month (the season) and hour (the daily cycle) stay. ``--keep day`` puts it back.
* **Skewed non-negative columns are log-transformed** (``log1p``; decided on the training split: skewness
  above 1). GPX's explanation features ``z`` enter the model linearly, and the weight noise has variance
  ``σ_w² ‖z‖²``, so a value 20 to 90 standard deviations out (RAIN, SO2, O3 have such values) would
  dominate both. The target is ``log1p(PM2.5)`` for the same reason; a contribution ``φ`` then multiplies the
  concentration by ``exp(s_y · φ)`` (``s_y`` the target's standard deviation), which is how the individual
  explanations below are read.
* **The split holds out whole days** (``--split day``, default): 10% of the calendar days, all their hours
  and stations, form the test set. The rows are hourly time series from 12 nearby stations; a random
  row split (``--split random``) would put the same hour at other stations into the training set and
  overstate the accuracy (PROVENANCE.md warns about this). Whole-day hold-out keeps every season in both
  sets; neighbouring days are still in training, so this is interpolation, not forecasting.

Features and target are standardised with the training statistics, so weights are "standardised log
PM2.5 per standard deviation of the feature", and ``z = x`` (the 12 features are both the kernel inputs
and the explanation features). As a reference, an ordinary least-squares fit (the global linear model
that GPX makes local) is reported too.

Step 2: choose the hyperparameters on a subset. The hyperparameters are the noise ``σ_y²``, the weight
noise ``σ_w²``, the kernel's output scale and one lengthscale per input (ARD), and the ``M × D`` inducing
locations. They are well determined by a few tens of thousands of rows, while each L-BFGS evaluation
costs about ``2 n (dM)²`` flops (forward; the backward pass about as much again), so we fit on a random
``--subset`` of the training rows (``model.fit(progress=True)``: L-BFGS with a progress bar; above 5,000
rows the marginal likelihood is computed by Woodbury solves, exact and deterministic). The inducing
points start at random rows of the subset, the lengthscales at the median heuristic, the output scale at
``1/D`` (so the prior variance of ``f = wᵀz`` is about that of the standardised target). ``--subset 0``
fits on all training rows instead (about ``n / subset`` times slower per iteration), and
``--refine-iter N`` continues from the subset's hyperparameters with ``N`` L-BFGS iterations on all rows
(step 3b; each evaluation costs about ``n / subset`` times one on the subset, roughly 10 s for 370k rows
on an idle 2-core machine).

Step 3: condition on all rows. ``model.set_train_data(...)`` swaps in all ~370,000 training rows with the
fitted hyperparameters. The posterior needs one chunked pass over the rows to form the capacitance
matrix ``I + RᵀD⁻¹R`` (``dM × dM``) and its Cholesky factor; the script times this. The test RMSE
(prediction ``ŷ = zᵀ E[w]``) is reported for the subset-conditioned and the all-rows-conditioned model,
on the whole test split, in standardised log units and in µg/m³ (back-transformed median).

Step 4: the weight posterior at ``--n-explain`` test points (default 10,000): mean and per-point ``d × d``
covariance (``predict_weights(x).lazy_covariance_matrix.point_blocks()``), ``O(d²M²)`` per point and
independent of ``n``. Global feature importance is the mean absolute contribution ``mean_p |φ_pl|``.
Its uncertainty needs the *joint* posterior over points (the weights of nearby points are strongly
correlated, so averaging does not average the uncertainty away). The inducing-space posterior has the
form ``Cov[w] = P ⊗ I_d + HᵀH`` with ``P`` diagonal and ``H = L⁻¹E`` (``L`` the capacitance factor,
``E = I_d ⊗ Φ*ᵀ`` the test points' inducing features), so exact joint samples cost one triangular solve
per sample: ``w = E[w] + sqrt(P) ε₁ + Eᵀ L⁻ᵀ ε₂``. ``--samples`` of them give the importance with a
standard deviation and a 95% interval, and the same samples give the uncertainty of average weights per
hour-of-day block and per season, which show how the local linear model changes through the day and
the year.

Step 5: sanity checks on the uncertainty. (a) Where the contribution variance comes from: the weight
noise ``σ_w²``, the part of the prior the inducing points cannot carry (``k(x,x) − q(x,x)``, GPyTorch's
SGPR diagonal correction), and the data-dependent part ``HᵀH``. Only the last one shrinks with more
rows, so the shares say whether more data would make the explanations more certain. (b) The
contribution standard deviations are neither zero nor huge (quantiles, and the posterior weight sd
relative to the prior's). (c) The sum of the contribution covariance is the latent variance; together
with ``σ_y²`` it gives predictive intervals whose coverage on the held-out targets is compared with the
nominal levels. Too small (degenerate) contribution variances would show up as under-coverage, but
``σ_y²`` makes up most of the predictive variance here, so this check mostly tests ``σ_y²``; step 7
targets the contributions themselves.

Step 6: two individual explanations, the test points with the highest and the lowest predicted PM2.5
among the explained points: ``model.explain(x)`` gives the prediction, weights and contributions with
standard deviations; the script prints them with the multiplicative factor on PM2.5 and its 95% interval
and saves ``explain(...).plot(i)`` as PNG files (with ``importance.png`` and ``weights_by_hour.png``) in
``--out`` (default ``tutorials/_output``, or ``GPYTORCH_EXPLAIN_TUTORIAL_OUT``).
Without matplotlib the plots are skipped with a message.
It also checks that the contributions add up to the prediction and that ``zᵀ Cov[w] z`` is the latent
variance.

Step 7: a split-half check. The training rows are split into two halves and the model (same
hyperparameters) is conditioned on each; at ``--n-check`` explained points the difference of the two
posterior mean weights is divided by ``sqrt(s_A² + s_B²)``, where ``s`` is the data-dependent posterior
standard deviation (``HᵀH`` only: ``σ_w²`` and the diagonal correction do not move the means). If the
model's uncertainty for the smooth weights were honest, at least 95% of these z-scores would lie within
±1.96 (the check is conservative: both halves' errors share the prior's shrinkage). It is the one check
here that tests the data-dependent part of the contribution uncertainty against data, and it runs last
because it re-conditions the model twice.

Run from the repository root (the package importable, e.g. ``PYTHONPATH=.``)::

    python tutorials/explain_400k_rows.py                     # everything (timings below)
    python tutorials/explain_400k_rows.py --quick             # 20,000 random rows
    python tutorials/explain_400k_rows.py --refine-iter 10    # + 10 L-BFGS iterations on all rows
    python tutorials/explain_400k_rows.py --synthetic 30000 --quick   # a generated Beijing-like table

``--rows``, ``--subset``, ``--inducing``, ``--max-iter``, ``--n-explain``, ``--samples`` override the
presets; ``--quick`` only changes their defaults. The console output of a full default run is in
``tutorials/explain_400k_rows_output.txt``: on this 2-core machine, idle, it took 66 s in all (reading
the CSV 7 s; the fit 37 s, 53 L-BFGS evaluations on 30,000 rows at 0.7 s each; conditioning on 371,101
rows 7 s; 10,000 weight posteriors 1.2 s; peak RSS 1.3 GB), with a test RMSE of 0.448 (OLS 0.534).
Timings on a shared machine are noisy: a trial run while other benchmarks used the same cores took
about 9 minutes, mostly in the fit (two processes with two threads each on two cores slow these
kernels about tenfold; ``--threads 1`` can help then). ``--quick`` takes about 12 s, half of it reading
the CSV.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import pathlib
import sys
import time

import gpytorch
import numpy as np
import torch
from gpytorch.kernels import InducingPointKernel, RBFKernel, ScaleKernel

import gpytorch_explain
from gpytorch_explain import GPXModel, median_heuristic_lengthscale
from gpytorch_explain.operators import InducingWeightPosteriorLinearOperator

try:
    REPO = pathlib.Path(__file__).resolve().parents[1]
except NameError:  # a notebook kernel: the working directory is the repository or its tutorials/ folder
    REPO = pathlib.Path.cwd().parent if pathlib.Path.cwd().name == "tutorials" else pathlib.Path.cwd()
DEFAULT_DATA_DIR = pathlib.Path(os.environ.get("GPYTORCH_EXPLAIN_DATA_DIR", REPO.parent / "shared" / "datasets"))
DEFAULT_OUT = pathlib.Path(os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_OUT", REPO / "tutorials" / "_output"))
#: the small mode (GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1): generated rows and small settings, a few seconds
SMALL_ARGS = [
    "--synthetic", "3000", "--quick", "--subset", "1000", "--inducing", "12", "--max-iter", "5",
    "--refine-iter", "1", "--n-explain", "300", "--samples", "20", "--n-check", "50", "--no-progress",
]  # fmt: skip
DATA_FILE = "beijing_air_quality_pm25.csv"
TARGET = "PM2.5"
NEAR_DUPLICATE = "PM10"
EXCLUDED = {
    "PM10": "a near-duplicate of the target (PM2.5 is part of PM10)",
    "day": "day of the month: with year and month it pins the date, i.e. neighbouring days' episodes",
}
DTYPE = torch.float64
PRESETS = {
    "full": {"rows": 0, "subset": 30_000, "inducing": 64, "max_iter": 50, "n_explain": 10_000, "samples": 200},
    "quick": {"rows": 20_000, "subset": 6_000, "inducing": 32, "max_iter": 30, "n_explain": 2_000, "samples": 100},
}
SEASONS = {
    "winter (DJF)": (12, 1, 2),
    "spring (MAM)": (3, 4, 5),
    "summer (JJA)": (6, 7, 8),
    "autumn (SON)": (9, 10, 11),
}
HOUR_BLOCKS = {"00-05h": range(0, 6), "06-11h": range(6, 12), "12-17h": range(12, 18), "18-23h": range(18, 24)}
COMPASS = ["N", "NNE", "NE", "ENE", "E", "ESE", "SE", "SSE", "S", "SSW", "SW", "WSW", "W", "WNW", "NW", "NNW"]
STATIONS = [
    "Aotizhongxin",
    "Changping",
    "Dingling",
    "Dongsi",
    "Guanyuan",
    "Gucheng",
    "Huairou",
    "Nongzhanguan",
    "Shunyi",
    "Tiantan",
    "Wanliu",
    "Wanshouxigong",
]


# ---------------------------------------------------------------------------------------------- bookkeeping
def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB; Linux reports ``ru_maxrss`` in KB)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return float("nan")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 / (1024 if sys.platform == "darwin" else 1)


class Clock:
    """Times the phases of the tutorial and prints each one's duration and the peak memory so far."""

    def __init__(self):
        self.start = time.perf_counter()
        self.phases: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, key: str, title: str):
        print(f"\n=== {title}", flush=True)
        start = time.perf_counter()
        yield
        self.phases[key] = time.perf_counter() - start
        print(f"--- [{key}] {self.phases[key]:.1f} s, peak RSS so far {peak_rss_mb():.0f} MB", flush=True)

    @property
    def total(self) -> float:
        return time.perf_counter() - self.start


@contextlib.contextmanager
def inducing_space():
    """Use the inducing-space (Woodbury) posterior at every ``n``, not only above the dense limit (5,000).

    With an inducing-point base kernel it is exact and the cheapest path; forcing it keeps the small
    synthetic runs on the same code path as the 400k-row run.
    """
    with gpytorch_explain.settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0):
        yield


# ---------------------------------------------------------------------------------------------- step 1: data
def _as_column(values) -> np.ndarray:
    """A float64 column (NaN for empty cells) if every value parses as a number, else a string column."""
    text = np.asarray(values)
    try:
        return np.where(text == "", "nan", text).astype(np.float64)
    except ValueError:
        return text


def read_beijing(path: pathlib.Path) -> dict[str, np.ndarray]:
    """The CSV file as ``{column: array}``, in file order (float64 with NaN, or strings)."""
    if not path.is_file():
        raise SystemExit(f"{path} not found; pass --data-dir (the folder with {DATA_FILE}) or use --synthetic N.")
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        columns = list(zip(*reader, strict=True))
    return {name: _as_column(col) for name, col in zip(header, columns, strict=True)}


def synthetic_beijing(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A generated table with the Beijing file's columns, missing values and rough behaviour (for tests).

    Winter, calm and humid hours are polluted; wind cleans the air (more so at night); CO and NO2 follow
    PM2.5; PM10 is PM2.5 plus coarse dust. About 1% of each measured feature and 2% of the targets are missing.
    """
    rng = np.random.default_rng(seed)
    stamp = np.datetime64("2013-03-01T00") + rng.integers(0, 35_064, n).astype("timedelta64[h]")
    day = stamp.astype("datetime64[D]")
    month_start = stamp.astype("datetime64[M]")
    hour = (stamp - day).astype(np.int64)
    year = month_start.astype(np.int64) // 12 + 1970
    month = month_start.astype(np.int64) % 12 + 1
    dom = (day - month_start.astype("datetime64[D]")).astype(np.int64) + 1
    winter = np.cos(2 * np.pi * (day - np.datetime64("2013-01-15")).astype(np.int64) / 365.25)
    diurnal = np.sin(2 * np.pi * (hour - 9) / 24)
    temp = 13 - 14 * winter + 4 * diurnal + rng.normal(0, 3, n)
    dewp = temp - 12 + 4 * rng.normal(0, 1, n) + 3 * (1 - winter)
    pres = 1012 + 10 * winter + rng.normal(0, 4, n)
    wspm = rng.gamma(2.0, 0.9, n)
    rain = np.where(rng.random(n) < 0.04, rng.exponential(1.5, n), 0.0)
    night = (hour < 6) | (hour >= 20)
    log_pm = (
        3.9
        + (0.5 + 0.2 * winter) * (dewp + 2) / 14
        - 0.35 * (1 + 0.5 * night) * (wspm - 1.8) / 1.3
        + 0.3 * winter
        - 0.1 * (year - 2015)
        - 0.3 * (rain > 0)
        + rng.normal(0, 0.45, n)
    )
    pm25 = np.clip(np.round(np.expm1(log_pm)), 2, 999)
    co = np.exp(np.log(800) + 0.7 * (log_pm - 3.9) + rng.normal(0, 0.3, n))
    no2 = np.exp(np.log(45) + 0.5 * (log_pm - 3.9) + 0.2 * night + rng.normal(0, 0.3, n))
    so2 = np.exp(np.log(8) + 0.5 * winter + 0.3 * (log_pm - 3.9) + rng.normal(0, 0.6, n))
    o3 = np.exp(np.log(45) + 0.6 * diurnal - 0.4 * winter - 0.2 * (log_pm - 3.9) + rng.normal(0, 0.5, n))
    pm10 = np.round(pm25 * rng.uniform(1.05, 1.8, n))
    frame = {
        "year": year.astype(np.float64),
        "month": month.astype(np.float64),
        "day": dom.astype(np.float64),
        "hour": hour.astype(np.float64),
        "PM10": pm10,
        "SO2": so2,
        "NO2": no2,
        "CO": co,
        "O3": o3,
        "TEMP": temp,
        "PRES": pres,
        "DEWP": dewp,
        "RAIN": rain,
        "wd": np.asarray(COMPASS)[rng.integers(0, 16, n)],
        "WSPM": wspm,
        "station": np.asarray(STATIONS)[rng.integers(0, 12, n)],
        TARGET: pm25,
    }
    for name in ("PM10", "SO2", "NO2", "CO", "O3", "TEMP", "PRES", "DEWP", "RAIN", "WSPM"):
        frame[name][rng.random(n) < 0.01] = np.nan
    frame[TARGET][rng.random(n) < 0.02] = np.nan
    return frame


def _skewness(v: np.ndarray) -> float:
    sd = v.std()
    return float(((v - v.mean()) ** 3).mean() / sd**3) if sd > 0 else 0.0


def prepare(frame: dict[str, np.ndarray], args, rng: np.random.Generator) -> dict:
    """Clean, split, impute, transform and standardise; prints what it does and why."""
    target = frame[TARGET].astype(np.float64)
    has_target = np.isfinite(target)
    numeric = [c for c, v in frame.items() if c != TARGET and v.dtype.kind == "f"]
    strings = [c for c, v in frame.items() if c != TARGET and v.dtype.kind != "f"]
    print(f"{len(target):,} rows; numeric columns {', '.join(numeric)}; string columns {', '.join(strings)} (dropped)")
    print(f"rows without {TARGET}: {int((~has_target).sum()):,} (dropped)")
    rows = np.flatnonzero(has_target)
    if args.rows and args.rows < rows.size:
        rows = np.sort(rng.choice(rows, size=args.rows, replace=False))
        print(f"--rows: a random {args.rows:,} of them")

    # the split: whole calendar days (all their hours and stations) or random rows
    if args.split == "day":
        day_key = frame["year"][rows] * 10_000 + frame["month"][rows] * 100 + frame["day"][rows]
        days = np.unique(day_key)
        test_days = rng.choice(days, size=max(1, round(args.test_fraction * days.size)), replace=False)
        is_test = np.isin(day_key, test_days)
        split_info = f"{test_days.size} of {days.size} calendar days held out"
    else:
        is_test = np.zeros(rows.size, dtype=bool)
        is_test[rng.choice(rows.size, size=max(1, round(args.test_fraction * rows.size)), replace=False)] = True
        split_info = "random rows"
    train, test = rows[~is_test], rows[is_test]
    print(f"split ({args.split}): {train.size:,} train / {test.size:,} test rows, {split_info}")

    # PM10: how close is it to the target? (on training rows where both are present)
    if NEAR_DUPLICATE in numeric:
        pm10, pm25 = frame[NEAR_DUPLICATE][train], target[train]
        ok = np.isfinite(pm10) & (pm10 > 0)
        corr = np.corrcoef(np.log1p(pm10[ok]), np.log1p(pm25[ok]))[0, 1]
        ratio = np.median(pm25[ok] / pm10[ok])
        print(f"{NEAR_DUPLICATE}: corr(log PM10, log PM2.5) = {corr:.3f}, median PM2.5/PM10 = {ratio:.2f}")
    for c, reason in EXCLUDED.items():
        if c in numeric:
            print(f"{c}: {'kept (--keep)' if c in args.keep else 'excluded'}, {reason}")
    features = [c for c in numeric if c not in EXCLUDED or c in args.keep]

    x_raw = np.stack([frame[c][rows] for c in features], axis=1)
    x_train_raw, x_test_raw = x_raw[~is_test], x_raw[is_test]
    medians = np.nanmedian(x_train_raw, axis=0)
    missing = np.isnan(x_raw).sum(0)
    imputed = ", ".join(f"{c} {m:,}" for c, m in zip(features, missing, strict=True) if m)
    print(f"imputed with training medians: {imputed or 'nothing'}")
    x_train_raw = np.where(np.isnan(x_train_raw), medians, x_train_raw)
    x_test_raw = np.where(np.isnan(x_test_raw), medians, x_test_raw)

    x_train, x_test = x_train_raw.copy(), x_test_raw.copy()
    logged = []
    for j, c in enumerate(features):
        col = x_train[:, j]
        if col.min() >= 0 and _skewness(col) > 1.0:
            logged.append(f"{c} ({_skewness(col):.1f})")
            x_train[:, j], x_test[:, j] = np.log1p(col), np.log1p(np.maximum(x_test[:, j], 0))
    print(f"log1p-transformed (training skewness > 1): {', '.join(logged) or 'nothing'}")
    mu, sd = x_train.mean(0), x_train.std(0)
    sd[sd < 1e-12] = 1.0
    x_train, x_test = (x_train - mu) / sd, (x_test - mu) / sd
    y_log = np.log1p(target[rows])
    y_mu, y_sd = y_log[~is_test].mean(), y_log[~is_test].std()
    print(
        f"target log1p(PM2.5): mean {y_mu:.3f}, sd {y_sd:.3f} (baseline exp(mean) - 1 = {math.expm1(y_mu):.1f} µg/m³); "
        f"features: {len(features)} ({', '.join(features)})"
    )

    def as_tensor(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=DTYPE)

    return {
        "names": features,
        "x": as_tensor(x_train),
        "y": as_tensor((y_log[~is_test] - y_mu) / y_sd),
        "x_test": as_tensor(x_test),
        "y_test": as_tensor((y_log[is_test] - y_mu) / y_sd),
        "x_test_raw": x_test_raw,
        "y_test_raw": target[test],
        "month_test": frame["month"][test].astype(int) if "month" in frame else None,
        "hour_test": frame["hour"][test].astype(int) if "hour" in frame else None,
        "y_mu": float(y_mu),
        "y_sd": float(y_sd),
    }


# ---------------------------------------------------------------------------------------------- helpers
def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).pow(2).mean().sqrt().item()


def to_ugm3(y_std: torch.Tensor, data: dict) -> torch.Tensor:
    """Standardised log1p(PM2.5) back to µg/m³ (of a predictive mean: the predictive median)."""
    return torch.expm1(data["y_mu"] + data["y_sd"] * y_std)


@torch.no_grad()
def predict_mean(model: GPXModel, x: torch.Tensor, chunk: int = 20_000) -> torch.Tensor:
    """``ŷ = zᵀ E[w]`` (here ``z = x``), in chunks; only the weight means are computed."""
    return torch.cat([(model.predict_weights(xc).mean * xc).sum(-1) for xc in x.split(chunk)])


def describe_hyperparameters(model: GPXModel, names: list[str]) -> str:
    ipk = model.base_kernel
    ell = ipk.base_kernel.base_kernel.lengthscale.detach().reshape(-1)
    order = torch.argsort(ell).tolist()
    shown = ", ".join(f"{names[j]} {ell[j].item():.2g}" for j in order)
    return (
        f"σ_y² = {model.likelihood.noise.item():.4f}, σ_w² = {model.weight_noise.item():.2e}, "
        f"outputscale = {ipk.base_kernel.outputscale.item():.4f}\n"
        f"ARD lengthscales (short = the weights change fast along that input): {shown}"
    )


def joint_weight_samples(post, num: int, gen: torch.Generator) -> torch.Tensor:
    r"""``num`` exact joint samples of the weights at all points, ``(m, d, num)``.

    ``Cov[w] = P ⊗ I_d + HᵀH`` with ``H = L⁻¹E``, so ``E[w] + sqrt(P) ε₁ + Eᵀ L⁻ᵀ ε₂`` has exactly that
    covariance; ``Eᵀu`` for ``u`` reshaped to ``(d, M)`` is ``Φ* u_lᵀ`` per feature ``l``.
    """
    covar = post.lazy_covariance_matrix
    if not isinstance(covar, InducingWeightPosteriorLinearOperator):
        raise TypeError("joint_weight_samples needs the inducing-space posterior (see inducing_space()).")
    phi, chol = covar.test_features, covar.capacitance_cholesky
    m, d = post.mean.shape
    eps = torch.randn(chol.size(-1), num, generator=gen, dtype=chol.dtype)
    u = torch.linalg.solve_triangular(chol.mT, eps, upper=True).reshape(d, phi.size(-1), num)
    smooth = torch.einsum("pj,ljs->pls", phi, u)
    local = covar.prior_covar.diagonal().sqrt()[:, None, None] * torch.randn(m, d, num, generator=gen, dtype=DTYPE)
    return post.mean.unsqueeze(-1) + smooth + local


def group_matrix(labels: np.ndarray, groups: dict[str, tuple | range]) -> tuple[list[str], torch.Tensor]:
    """Row-normalised membership matrix ``(G, m)``: ``A @ w`` averages ``w`` over each group."""
    names, rows = [], []
    for name, members in groups.items():
        mask = torch.as_tensor(np.isin(labels, list(members)), dtype=DTYPE)
        if mask.sum() > 0:
            names.append(f"{name} (n={int(mask.sum())})")
            rows.append(mask / mask.sum())
    return names, torch.stack(rows)


def print_group_table(title, group_names, mean, sd, names, top):
    print(f"\n{title}")
    width = max(len(g) for g in group_names)
    print(" " * width + "".join(f"{names[j]:>18}" for j in top))
    for g, gname in enumerate(group_names):
        cells = "".join(f"{mean[g, j]:>+10.3f} ± {sd[g, j]:<5.3f}" for j in top)
        print(f"{gname:<{width}}{cells}")


def savefig(ax_or_fig, path: pathlib.Path, saved: list[str]):
    fig = getattr(ax_or_fig, "figure", ax_or_fig)
    fig.savefig(path, dpi=120)
    saved.append(str(path))
    import matplotlib
    import matplotlib.pyplot as plt

    if "inline" in matplotlib.get_backend():  # a notebook: show the figure too
        plt.show()
    else:
        plt.close(fig)


# ---------------------------------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Explain the Beijing PM2.5 data (412k rows) with GPX on inducing points.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data-dir", type=pathlib.Path, default=DEFAULT_DATA_DIR, help=f"folder with {DATA_FILE}")
    parser.add_argument("--synthetic", type=int, default=0, metavar="N", help="use N generated Beijing-like rows")
    parser.add_argument("--quick", action="store_true", help="small presets (20k rows) for a run of about a minute")
    parser.add_argument("--rows", type=int, default=None, help="random rows of the file to use (0: all)")
    parser.add_argument("--subset", type=int, default=None, help="training rows for the hyperparameters (0: all)")
    parser.add_argument("--inducing", type=int, default=None, help="inducing points M")
    parser.add_argument("--max-iter", type=int, default=None, help="L-BFGS iterations of the hyperparameter fit")
    parser.add_argument(
        "--refine-iter", type=int, default=0, help="then continue L-BFGS on all training rows (≈ 15 s each on 370k)"
    )
    parser.add_argument("--n-explain", type=int, default=None, help="test points with a full weight posterior")
    parser.add_argument("--samples", type=int, default=None, help="joint posterior samples for the importance")
    parser.add_argument("--n-check", type=int, default=2000, help="points of the split-half check (0: skip it)")
    parser.add_argument("--split", choices=["day", "random"], default="day", help="hold out whole days or rows")
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument(
        "--keep", action="append", default=[], choices=list(EXCLUDED), help="keep an excluded column (repeatable)"
    )
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="plots")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for key, value in PRESETS["quick" if args.quick else "full"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv=None) -> dict:
    """Run the tutorial; returns the main numbers (used by the test)."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    clock = Clock()
    results: dict = {"timings": clock.phases}
    print(
        f"GPX on inducing points, Beijing PM2.5 | torch {torch.__version__}, gpytorch {gpytorch.__version__}, "
        f"{torch.get_num_threads()} threads | settings: rows={args.rows or 'all'}, subset={args.subset or 'all'}, "
        f"M={args.inducing}, max_iter={args.max_iter}, refine_iter={args.refine_iter}, n_explain={args.n_explain}, "
        f"samples={args.samples}, split={args.split}, seed={args.seed}"
    )

    # ------------------------------------------------------------------ step 1
    with clock.phase("load", "step 1: load, clean, split, standardise"):
        if args.synthetic:
            print(f"synthetic Beijing-like table with {args.synthetic:,} rows (--synthetic)")
            frame = synthetic_beijing(args.synthetic, args.seed)
        else:
            path = args.data_dir / DATA_FILE
            print(f"reading {path}")
            frame = read_beijing(path)
        data = prepare(frame, args, rng)
        del frame
    x, y, x_test, y_test, names = data["x"], data["y"], data["x_test"], data["y_test"], data["names"]
    n, dims = x.shape

    with clock.phase("OLS", "reference: ordinary least squares (the global linear model)"):
        design = torch.cat([x, torch.ones(n, 1, dtype=DTYPE)], -1)
        beta = torch.linalg.lstsq(design, y.unsqueeze(-1)).solution.squeeze(-1)
        ols = torch.cat([x_test, torch.ones(x_test.size(0), 1, dtype=DTYPE)], -1) @ beta
        results["rmse_ols"] = rmse(ols, y_test)
        results["rmse_ols_ugm3"] = rmse(to_ugm3(ols, data), torch.as_tensor(data["y_test_raw"]))
        print(
            f"test RMSE {results['rmse_ols']:.4f} (standardised log units), {results['rmse_ols_ugm3']:.1f} µg/m³; "
            f"predicting the mean: {rmse(torch.zeros_like(y_test), y_test):.4f}"
        )

    # ------------------------------------------------------------------ step 2
    subset = n if not args.subset or args.subset >= n else args.subset
    with clock.phase("fit", f"step 2: hyperparameters by L-BFGS on {subset:,} rows (M = {args.inducing})"):
        idx = torch.randperm(n, generator=gen)[:subset]
        xs, ys = x[idx], y[idx]
        likelihood = gpytorch.likelihoods.GaussianLikelihood().to(DTYPE)
        likelihood.noise = 0.1
        rbf = RBFKernel(ard_num_dims=dims)
        rbf.lengthscale = median_heuristic_lengthscale(xs)
        scaled = ScaleKernel(rbf)
        scaled.outputscale = 1.0 / dims
        inducing = xs[: min(args.inducing, subset)].clone()  # xs is already in random order
        ipk = InducingPointKernel(scaled, inducing_points=inducing, likelihood=likelihood)
        model = GPXModel(xs, ys, likelihood=likelihood, base_kernel=ipk, feature_names=names)
        model.weight_noise = 0.01
        flops = 2 * subset * (dims * inducing.size(0)) ** 2
        print(f"one evaluation ≈ {flops / 1e9:.0f} GFLOP forward (2 n (dM)², dM = {dims * inducing.size(0)})")
        start = time.perf_counter()
        with inducing_space():  # Woodbury at every subset size (the dense path would be O(n³))
            model.fit(max_iter=args.max_iter, progress=not args.no_progress)
        evals = len(model.fit_history)
        fit_s = time.perf_counter() - start
        print(
            f"{evals} evaluations in {fit_s:.1f} s ({fit_s / max(evals, 1):.2f} s each); "
            f"loss {model.fit_history[0]:.4f} -> {model.fit_history[-1]:.4f}"
        )
        print(describe_hyperparameters(model, names))
        results["fit_loss"] = model.fit_history[-1]
        results["names"] = names

    with clock.phase("rmse-subset", f"test RMSE, conditioned on the {subset:,} subset rows"), inducing_space():
        pred_subset = predict_mean(model, x_test)
        results["rmse_subset"] = rmse(pred_subset, y_test)
        print(f"test RMSE {results['rmse_subset']:.4f} on {x_test.size(0):,} test rows")

    # ------------------------------------------------------------------ step 3
    with clock.phase("condition", f"step 3: condition on all {n:,} training rows"), inducing_space(), torch.no_grad():
        model.set_train_data(inputs=x, targets=y, strict=False)
        start = time.perf_counter()
        model.predict_weights(x_test[:1])  # builds the mean cache and the capacitance factor: one pass over n
        print(f"capacitance ({dims * inducing.size(0)}²) and mean cache: {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        pred = predict_mean(model, x_test)
        print(f"weight means and predictions at {x_test.size(0):,} test rows: {time.perf_counter() - start:.1f} s")
    results["rmse_all_rows"] = rmse(pred, y_test)
    if args.refine_iter and subset < n:
        with clock.phase("refine", f"step 3b: {args.refine_iter} more L-BFGS iterations on all {n:,} rows"):
            start = time.perf_counter()
            with inducing_space():
                model.fit(max_iter=args.refine_iter, progress=not args.no_progress)
            evals = len(model.fit_history)
            print(
                f"{evals} evaluations in {time.perf_counter() - start:.1f} s; "
                f"loss {model.fit_history[0]:.4f} -> {model.fit_history[-1]:.4f}"
            )
            print(describe_hyperparameters(model, names))
            with inducing_space(), torch.no_grad():
                pred = predict_mean(model, x_test)
    y_raw = torch.as_tensor(data["y_test_raw"])
    results["rmse"] = rmse(pred, y_test)
    results["rmse_ugm3"] = rmse(to_ugm3(pred, data), y_raw)
    refined = f"before the refinement: {results['rmse_all_rows']:.4f}; " if "refine" in clock.phases else ""
    print(
        f"\nTEST RMSE (ŷ = zᵀE[w], {x_test.size(0):,} held-out rows): {results['rmse']:.4f} standardised log units "
        f"= {results['rmse_ugm3']:.1f} µg/m³ (median back-transform)\n"
        f"  {refined}conditioned on the subset only: {results['rmse_subset']:.4f}; "
        f"OLS: {results['rmse_ols']:.4f} ({results['rmse_ols_ugm3']:.1f} µg/m³)"
    )

    # ------------------------------------------------------------------ step 4
    m = min(args.n_explain, x_test.size(0))
    pick = torch.randperm(x_test.size(0), generator=gen)[:m]
    xe, ye = x_test[pick], y_test[pick]
    with clock.phase("weights", f"step 4: weight posterior at {m:,} test points"), inducing_space(), torch.no_grad():
        post = model.predict_weights(xe)
        blocks = post.lazy_covariance_matrix.point_blocks()  # (m, d, d)
        w_mean = post.mean
        w_var = blocks.diagonal(dim1=-2, dim2=-1).clamp_min(0)
        phi_mean, phi_std = w_mean * xe, xe.abs() * w_var.sqrt()
        print(f"means and {dims}×{dims} covariances of {m:,} points: {clock.total:.0f} s into the run")

    with (
        clock.phase("samples", f"step 4b: global importance and weight variation from {args.samples} joint samples"),
        torch.no_grad(),
    ):
        group_sets = {}
        if data["hour_test"] is not None:
            group_sets["hour of day"] = group_matrix(data["hour_test"][pick.numpy()], HOUR_BLOCKS)
            group_sets["hour"] = group_matrix(data["hour_test"][pick.numpy()], {f"{h:02d}h": (h,) for h in range(24)})
        if data["month_test"] is not None:
            group_sets["season"] = group_matrix(data["month_test"][pick.numpy()], SEASONS)
        importance, group_draws = [], {k: [] for k in group_sets}
        with inducing_space():
            for start in range(0, args.samples, 50):
                draws = joint_weight_samples(post, min(50, args.samples - start), gen)  # (m, d, s)
                importance.append((draws * xe.unsqueeze(-1)).abs().mean(0).T)  # (s, d)
                for key, (_, mat) in group_sets.items():
                    group_draws[key].append(torch.einsum("gp,pls->sgl", mat, draws))
        importance = torch.cat(importance)
        point_importance = phi_mean.abs().mean(0)
        order = torch.argsort(importance.mean(0), descending=True).tolist()
        lo, hi = importance.quantile(0.025, dim=0), importance.quantile(0.975, dim=0)
        excl = ((phi_mean.abs() - 1.96 * phi_std) > 0).double().mean(0)
        print("global importance: mean |contribution| over the points (standardised log PM2.5)")
        print(f"{'feature':<8}{'|E φ|':>9}{'E mean|φ| ± sd':>22}{'95% interval':>20}{'φ ≠ 0 (95%)':>14}")
        for j in order:
            print(
                f"{names[j]:<8}{point_importance[j]:>9.4f}{importance[:, j].mean():>13.4f}"
                f" ± {importance[:, j].std():.4f}   [{lo[j]:.4f}, {hi[j]:.4f}]{100 * excl[j]:>12.0f}%"
            )
        print(
            "(|E φ|: the importance of the posterior mean contributions; E mean|φ|: its posterior mean, larger by "
            "Jensen's inequality since it includes the weight noise; last column: share of points whose "
            "contribution's 95% interval excludes 0)"
        )
        w_q = w_mean.quantile(torch.tensor([0.1, 0.9], dtype=DTYPE), dim=0)
        print("\nhow local is the model: the OLS coefficient next to the spread of GPX's mean weights over the points")
        print(f"{'feature':<8}{'OLS':>9}{'mean E[w]':>11}{'10%-90% of E[w]':>22}")
        for j in order:
            print(
                f"{names[j]:<8}{beta[j]:>+9.3f}{w_mean[:, j].mean():>+11.3f}      [{w_q[0, j]:+.3f}, {w_q[1, j]:+.3f}]"
            )
        results["importance"] = point_importance.numpy()
        results["importance_sd"] = importance.std(0).numpy()
        top = order[: min(5, dims)]
        group_summary = {}
        for key, (gnames, _) in group_sets.items():
            draws = torch.cat(group_draws[key])  # (S, G, d)
            group_summary[key] = (gnames, draws.mean(0), draws.std(0))
            if key != "hour":
                print_group_table(
                    f"average weight by {key} (± joint posterior sd of the average), top features:",
                    gnames,
                    draws.mean(0),
                    draws.std(0),
                    names,
                    top,
                )
        results["group_weights"] = {k: v[1].numpy() for k, v in group_summary.items()}

    # ------------------------------------------------------------------ step 5
    with clock.phase("checks", "step 5: sanity checks on the uncertainty"), inducing_space(), torch.no_grad():
        covar = post.lazy_covariance_matrix
        prior = covar.prior_covar.diagonal()  # σ_w² + (k(x,x) - q(x,x)) per point
        sw2 = model.weight_noise.item()
        total = w_var.clamp_min(1e-300)
        shares = [
            (sw2 / total).mean().item(),
            ((prior - sw2).unsqueeze(-1) / total).mean().item(),
            ((w_var - prior.unsqueeze(-1)).clamp_min(0) / total).mean().item(),
        ]
        print(
            "(a) weight variance, average shares: weight noise σ_w² {:.1%}, not carried by the inducing points "
            "(k - q) {:.1%}, data-dependent HᵀH {:.1%}".format(*shares)
        )
        prior_sd = math.sqrt(model.base_kernel.base_kernel.outputscale.item() + sw2)
        q = torch.tensor([0.05, 0.5, 0.95], dtype=DTYPE)
        nz = xe.abs() > 1e-8
        std_q = phi_std[nz].quantile(q).tolist()
        print(
            f"(b) contribution sd quantiles (5/50/95%): {std_q[0]:.4f} / {std_q[1]:.4f} / {std_q[2]:.4f}; "
            f"zero sds: {int((phi_std[nz] <= 0).sum())}; weight sd / prior sd: median "
            f"{(w_var.sqrt() / prior_sd).median():.3f}"
        )
        var_f = torch.einsum("pi,pij,pj->p", xe, blocks, xe)
        pred_sd = (var_f + model.likelihood.noise).sqrt()
        resid = ((ye - (w_mean * xe).sum(-1)) / pred_sd).abs()
        coverage = {}
        for level, zq in ((0.5, 0.6745), (0.8, 1.2816), (0.95, 1.96)):
            coverage[level] = (resid <= zq).double().mean().item()
        print(
            "(c) predictive intervals from the contribution covariance (Var f = zᵀCov[w]z, + σ_y²), coverage of "
            "the held-out targets: "
            + ", ".join(f"{int(100 * k)}% -> {100 * v:.1f}%" for k, v in coverage.items())
            + f"; share of Var y from the contributions: {(var_f / pred_sd**2).mean():.1%}"
        )
        results["coverage"] = coverage
        results["contribution_sd_median"] = std_q[1]

    # ------------------------------------------------------------------ step 6
    saved: list[str] = []
    plt = None
    if not args.no_plots:
        try:
            import matplotlib

            if "ipykernel" not in sys.modules:  # a script never opens a window
                matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("\nmatplotlib is not installed: skipping the plots (pip install 'gpytorch-explain[plot]')")
    with clock.phase("explain", "step 6: two individual explanations"), inducing_space(), torch.no_grad():
        pred_e = (w_mean * xe).sum(-1)
        chosen = [int(pred_e.argmax()), int(pred_e.argmin())]
        ex = model.explain(xe[chosen])
        gap_mean = (ex.prediction_mean - ex.contributions_mean.sum(-1)).abs().max().item()
        var_z = torch.einsum("pi,pij,pj->p", ex.z, ex.weights_covariance, ex.z)
        gap_var = (ex.latent_std.pow(2) - var_z).abs().max().item()
        print(
            f"checks: |prediction - Σ contributions| ≤ {gap_mean:.1e}, |Var f - zᵀCov[w]z| ≤ {gap_var:.1e}, "
            f"|explain - predict_weights| ≤ {(ex.weights_mean - w_mean[chosen]).abs().max():.1e}"
        )
        results["explain_gaps"] = (gap_mean, gap_var)
        raw = data["x_test_raw"][pick.numpy()[chosen]]
        observed = data["y_test_raw"][pick.numpy()[chosen]]
        for k, (label, i) in enumerate(zip(("highest", "lowest"), chosen, strict=True)):
            lo_ug, hi_ug = to_ugm3(ex.prediction_mean[k] + torch.tensor([-1.96, 1.96]) * ex.prediction_std[k], data)
            when = ""
            if data["month_test"] is not None and data["hour_test"] is not None:
                p = pick[i].item()
                when = f" (month {data['month_test'][p]}, {data['hour_test'][p]:02d}h)"
            print(
                f"\n{label} predicted PM2.5 among the explained points{when}: predicted "
                f"{to_ugm3(ex.prediction_mean[k], data):.0f} µg/m³ [95%: {lo_ug:.0f}, {hi_ug:.0f}], "
                f"observed {observed[k]:.0f} µg/m³; baseline {math.expm1(data['y_mu']):.0f} µg/m³"
            )
            print(f"{'feature':<8}{'value':>10}{'contribution ± sd':>22}{'factor on PM2.5 [95%]':>28}")
            mean_k, std_k = ex.contributions_mean[k], ex.contributions_std[k]
            for j in torch.argsort(mean_k.abs(), descending=True).tolist():
                f_lo, f_mid, f_hi = (
                    math.exp(data["y_sd"] * (mean_k[j] + s * std_k[j]).item()) for s in (-1.96, 0, 1.96)
                )
                print(
                    f"{names[j]:<8}{raw[k, j]:>10.4g}{mean_k[j]:>+13.3f} ± {std_k[j]:.3f}"
                    f"{f'×{f_mid:.2f} [{f_lo:.2f}, {f_hi:.2f}]':>28}"
                )
            if plt is not None:
                ax = ex.plot(k, top_k=dims)
                ax.set_title(
                    f"{label} predicted PM2.5 of the explained points: {to_ugm3(ex.prediction_mean[k], data):.0f} "
                    f"µg/m³ (observed {observed[k]:.0f})\ncontributions to standardised log PM2.5, ± 1 sd",
                    fontsize=9,
                )
                ax.figure.tight_layout()
                args.out.mkdir(parents=True, exist_ok=True)
                savefig(ax, args.out / f"explanation_{label}.png", saved)

    if plt is not None:
        fig, ax = plt.subplots(figsize=(6, 0.3 * dims + 1.2))
        rev = order[::-1]
        imp_mean, imp_sd = importance.mean(0).numpy(), importance.std(0).numpy()
        ax.barh(range(dims), imp_mean[rev], xerr=imp_sd[rev], color="tab:gray", capsize=3)
        ax.set_yticks(range(dims))
        ax.set_yticklabels([names[j] for j in rev])
        ax.set_xlabel("mean |contribution| (error bars: ±1 std, joint posterior)")
        fig.tight_layout()
        savefig(fig, args.out / "importance.png", saved)
        if "hour" in group_summary:
            gnames, g_mean, g_sd = (v.numpy() if torch.is_tensor(v) else v for v in group_summary["hour"])
            hours = [int(g[:2]) for g in gnames]
            fig, ax = plt.subplots(figsize=(8, 4))
            for j in top:
                ax.plot(hours, g_mean[:, j], label=names[j])
                ax.fill_between(hours, g_mean[:, j] - g_sd[:, j], g_mean[:, j] + g_sd[:, j], alpha=0.25)
            ax.axhline(0, color="black", linewidth=0.8)
            ax.set_xlabel("hour of day")
            ax.set_ylabel("average local weight (band: ±1 std, joint posterior)")
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            fig.tight_layout()
            savefig(fig, args.out / "weights_by_hour.png", saved)
        print(f"\nplots written: {', '.join(saved)}")
    results["plots"] = saved

    # ------------------------------------------------------------------ step 7
    n_check = min(args.n_check, m)
    if n_check > 0:
        with (
            clock.phase("split-half", f"step 7: split-half check at {n_check:,} points"),
            inducing_space(),
            torch.no_grad(),
        ):
            halves = torch.randperm(n, generator=gen).chunk(2)
            xc = xe[:n_check]
            means, data_var = [], []
            for half in halves:
                model.set_train_data(inputs=x[half], targets=y[half], strict=False)
                p = model.predict_weights(xc)
                c = p.lazy_covariance_matrix
                means.append(p.mean)
                diag = c.point_blocks().diagonal(dim1=-2, dim2=-1)
                data_var.append((diag - c.prior_covar.diagonal().unsqueeze(-1)).clamp_min(0))
            zscore = (means[0] - means[1]) / (data_var[0] + data_var[1]).sqrt().clamp_min(1e-300)
            within = (zscore.abs() <= 1.96).double().mean(0)
            results["split_half_within"] = within.mean().item()
            print(
                f"halves of {halves[0].numel():,} and {halves[1].numel():,} rows; share of |z| ≤ 1.96 (nominal ≥ 95%): "
                f"{100 * within.mean():.1f}% overall; median |z| {zscore.abs().median():.2f}"
            )
            print("per feature: " + ", ".join(f"{names[j]} {100 * within[j]:.0f}%" for j in order))

    print("\nphase timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in clock.phases.items()))
    print(f"total {clock.total:.1f} s, peak RSS {peak_rss_mb():.0f} MB")
    results["total_s"] = clock.total
    return results


# %% [markdown]
# ## Run
#
# Under a notebook kernel the options come from the environment variables above; as a script, from the
# command line (after the small-mode preset, so they override it).


# %%
def tutorial_argv() -> list[str]:
    """The arguments of :func:`main`: the small-mode preset (if asked for), then the command line (scripts only)."""
    argv = [] if "ipykernel" in sys.modules else sys.argv[1:]
    small = os.environ.get("GPYTORCH_EXPLAIN_TUTORIAL_SMALL", "") not in ("", "0")
    return (SMALL_ARGS if small else []) + argv


if __name__ == "__main__":
    results = main(tutorial_argv())
