#!/usr/bin/env python3
r"""``gpytorch-explain explain``: predictions and per-feature contributions, with stds, for the rows of a CSV.

Everything is reported in the target's units. With the standardisation of ``fit``
(:math:`\tilde x = (x - \bar x)/s_x`, :math:`y = \bar y + s_y \tilde y`), a contribution :math:`\tilde\phi_l` of the
standardised model is :math:`\phi_l = s_y\tilde\phi_l` in the target's units (its std scales the same way), and

.. math:: \sum_l \phi_l = \text{prediction} - \text{baseline},

where the baseline is the prediction at the training means of the features:

* GPX: :math:`\phi_l = s_y \tilde w_l \tilde z_l` (``GPXModel.explain``); the standardised model has zero mean and
  :math:`\tilde z = 0` at the means, so the baseline is :math:`\bar y` (plus :math:`s_y` times the model's
  intercept, which is 0 here);
* GPR: :math:`\phi_l = s_y\,\mathrm{IG}_l` (the exact posterior of the integrated gradients from the training
  mean), and the baseline is :math:`\bar y + s_y\,\mathbb E[\tilde f(\tilde{\mathbf b})]` (completeness).

The output CSV has the columns ``row`` (or the ``--row-ids`` column), ``prediction``, ``prediction_std``
(predictive: latent + observation noise), ``latent_std``, ``baseline``, and ``contribution_<name>`` /
``contribution_<name>_std`` per explanation feature (stds are ±1 posterior std, latent).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import textwrap
import warnings

import numpy as np
import torch
from gpytorch.utils.warnings import GPInputWarning

from ..attribution import PosteriorIntegratedGradients as PosteriorIG
from .dataio import (
    NAN_POLICIES,
    CLIError,
    atomic_output,
    check_input_file,
    check_output_path,
    handle_nan,
    read_csv,
)
from .modelfile import build_model, load_payload

__all__ = ["add_parser", "explain_rows", "run"]

EXAMPLES = """\
examples:
  gpytorch-explain explain model.pt rows.csv --out explanations.csv
  gpytorch-explain explain model.pt rows.csv --out explanations.csv --plots plots/ --row-ids id
  gpytorch-explain explain model.pt rows.csv --nan mean --out explanations.csv

Columns of the output: row (or the --row-ids column), prediction, prediction_std, latent_std, baseline,
contribution_<feature>, contribution_<feature>_std. All in the target's units; "std" is 1 posterior std.
The contributions add up to prediction - baseline (baseline: the prediction at the training means).
"""

#: rows explained per batch
CHUNK = 1024


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "explain",
        help="explain the rows of a CSV with a fitted model file",
        description=textwrap.fill(
            "Predict each row of a CSV with a model file from `gpytorch-explain fit`, with each feature's "
            "contribution and its std (GPX: local contributions; GPR: integrated gradients from the training mean).",
            100,
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="model file written by `gpytorch-explain fit`")
    parser.add_argument("rows", help="CSV file with (at least) the model's feature columns")
    parser.add_argument("--out", required=True, help="CSV file to write")
    parser.add_argument("--plots", metavar="DIR", help="also write one PNG per row and summary.png into DIR")
    parser.add_argument("--row-ids", metavar="COLUMN", help="column that names the rows (default: row numbers)")
    parser.add_argument(
        "--nan",
        choices=NAN_POLICIES,
        default="error",
        help="rows with missing values: error (default), drop them, or fill with the training means",
    )
    parser.set_defaults(run=run)
    return parser


def _explain_chunk(payload: dict, model, x: torch.Tensor, z: torch.Tensor | None, attribution) -> dict:
    """The standardised model's answers for a chunk of standardised rows (see :func:`explain_rows`)."""
    if payload["kind"] == "gpx":
        expl = model.explain(x, z)
        return {
            "prediction": expl.prediction_mean,
            "prediction_std": expl.prediction_std,
            "latent_std": expl.latent_std,
            "baseline": torch.full_like(expl.prediction_mean, expl.intercept),
            "contributions": expl.contributions_mean,
            "contributions_std": expl.contributions_std,
        }
    with torch.no_grad():
        latent = model(x)
        predictive = model.likelihood(latent)
        baseline = model(attribution.baselines).mean.mean()  # E[f(b)]; IG sums to f(x) - f(b)
    attr = attribution(x)
    return {
        "prediction": predictive.mean,
        "prediction_std": predictive.variance.clamp_min(0).sqrt(),
        "latent_std": latent.variance.clamp_min(0).sqrt(),
        "baseline": baseline.expand_as(predictive.mean),
        "contributions": attr.mean,
        "contributions_std": attr.variance.sqrt(),
    }


#: the output keys and their shifts: values are ``shift + s_y * value`` in the target's units
_KEYS = ("prediction", "prediction_std", "latent_std", "baseline", "contributions", "contributions_std")
_SHIFTED = ("prediction", "baseline")


def explain_rows(payload: dict, model, x_raw: np.ndarray, z_raw: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Predictions and contributions in the target's units for raw feature rows ``x_raw`` (``(m, D)``).

    :param z_raw: the explanation features ``(m, d)`` of a GPX model with separate z (else ``None``).
    :return: ``prediction``, ``prediction_std``, ``latent_std``, ``baseline`` (``(m,)``), ``contributions`` and
        ``contributions_std`` (``(m, d)``).
    """
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    y_mean, y_std = float(payload["y_mean"]), float(payload["y_std"])
    x = (as_tensor(x_raw) - payload["x_mean"]) / payload["x_std"]
    z = None if z_raw is None else (as_tensor(z_raw) - payload["z_mean"]) / payload["z_std"]
    # GPR: the baseline is the training mean of the (standardised) inputs, PosteriorIntegratedGradients' default
    attribution = PosteriorIG(model) if payload["kind"] == "gpr" else None
    parts: dict[str, list[np.ndarray]] = {key: [] for key in _KEYS}
    for start in range(0, x.size(0), CHUNK):
        zs = None if z is None else z[start : start + CHUNK]
        with warnings.catch_warnings():  # explaining the training rows themselves is a normal request
            warnings.filterwarnings("ignore", category=GPInputWarning)
            chunk = _explain_chunk(payload, model, x[start : start + CHUNK], zs, attribution)
        for key in _KEYS:
            shift = y_mean if key in _SHIFTED else 0.0
            parts[key].append(shift + y_std * chunk[key].detach().cpu().numpy())
    out = {key: np.concatenate(value) for key, value in parts.items()}
    gap = np.abs(out["contributions"].sum(-1) - (out["prediction"] - out["baseline"])).max()
    scale = float(np.abs(out["contributions"]).sum(-1).max())  # relative: targets in any units
    if gap > 1e-6 * max(scale, float(np.abs(out["prediction"] - out["baseline"]).max()), 1e-300):
        print(
            f"warning: the contributions miss prediction - baseline by up to {gap:.3g} (target units); "
            "the explanation is approximate",
            file=sys.stderr,
        )
    return out


def _read_rows(args: argparse.Namespace, payload: dict):
    table = read_csv(args.rows)
    features, z_names = list(payload["feature_names"]), list(payload["z_names"])
    separate_z = payload["kind"] == "gpx" and "train_z" in payload
    columns = list(dict.fromkeys([*features, *(z_names if separate_z else [])]))
    missing = [name for name in columns if name not in table.header]
    if missing:
        raise CLIError(
            f"{args.rows}: no column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}; the model in "
            f"{args.model} was fitted on {','.join(columns)} (the file has {','.join(table.header)})"
        )
    values = table.numeric(columns)
    means = dict(zip(features, payload["x_mean"].tolist(), strict=True))
    if separate_z:
        means.update(dict(zip(z_names, payload["z_mean"].tolist(), strict=True)))
    fill = np.array([means[name] for name in columns])
    values, kept = handle_nan(values, columns, args.nan, args.rows, fill=fill)
    if kept.size < len(table):
        print(f"note: --nan drop dropped {len(table) - kept.size} row(s) with missing values", file=sys.stderr)
    ids = [str(i) for i in kept]
    if args.row_ids is not None:
        table.require([args.row_ids], "--row-ids column")
        names = table.text(args.row_ids)
        ids = [names[i] for i in kept]
    x_raw = values[:, [columns.index(name) for name in features]]
    z_raw = values[:, [columns.index(name) for name in z_names]] if separate_z else None
    return ids, x_raw, z_raw


def format_row(row_id: str, result: dict[str, np.ndarray], i: int) -> list[str]:
    """The output CSV's cells for row ``i`` (full float precision)."""
    cells = [row_id]
    cells += [f"{result[key][i]:.17g}" for key in ("prediction", "prediction_std", "latent_std", "baseline")]
    for mean, std in zip(result["contributions"][i], result["contributions_std"][i], strict=True):
        cells += [f"{mean:.17g}", f"{std:.17g}"]
    return cells


def run(args: argparse.Namespace) -> int:
    check_input_file(args.model, "model file")
    check_output_path(args.out)  # before any work (and before any plot is written)
    if args.plots is not None:
        from .plots import require_matplotlib

        require_matplotlib()
        if os.path.exists(args.plots) and not os.path.isdir(args.plots):
            raise CLIError(f"--plots {args.plots} is a file, not a folder")
    payload = load_payload(args.model)
    ids, x_raw, z_raw = _read_rows(args, payload)
    model = build_model(payload)
    result = explain_rows(payload, model, x_raw, z_raw)
    names = list(payload["z_names"])
    header = [args.row_ids or "row", "prediction", "prediction_std", "latent_std", "baseline"]
    for name in names:
        header += [f"contribution_{name}", f"contribution_{name}_std"]
    if args.plots is not None:
        from .plots import write_plots

        if os.path.exists(args.plots) and not os.path.isdir(args.plots):
            raise CLIError(f"--plots {args.plots} is a file, not a folder")
        os.makedirs(args.plots, exist_ok=True)
        what = "contribution (GPX, local)" if payload["kind"] == "gpx" else "integrated gradient (GPR)"
        write_plots(args.plots, ids, names, result, str(payload["target_name"]), what)
    with atomic_output(args.out, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for i, row_id in enumerate(ids):
            writer.writerow(format_row(row_id, result, i))
    plots = "" if args.plots is None else f" and {len(ids) + 1} PNGs in {args.plots}"
    print(f"explained {len(ids)} row(s) with the {payload['kind']} model; wrote {args.out}{plots}")
    return 0
