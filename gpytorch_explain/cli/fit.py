#!/usr/bin/env python3
r"""``gpytorch-explain fit``: standardise a CSV, fit GPX or GP regression, save one model file."""

from __future__ import annotations

import argparse
import math
import sys
import textwrap

import numpy as np
import torch

from .dataio import NAN_POLICIES, CLIError, check_output_path, handle_nan, read_csv, split_names
from .modelfile import StandardGPR, save_payload, standardise

__all__ = ["add_parser", "run"]

EXAMPLES = """\
examples:
  gpytorch-explain fit data.csv --target y --out model.pt
  gpytorch-explain fit data.csv --target price --features area,rooms,age --model gpr --iterations 50 --out m.pt
  gpytorch-explain fit data.csv --target y --features a,b --z a,b,c --nan mean --quiet --out model.pt

The features and the target are standardised (column mean 0, std 1) before fitting; the model file keeps
the means and stds, so `gpytorch-explain explain` reports everything in the CSV's units.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "fit",
        help="fit a GPX (or GP regression) model to a CSV and save it",
        description=textwrap.fill(
            "Fit a GPX model (default) or a GP regression model to a CSV file and save it, with its "
            "preprocessing, to one model file.",
            100,
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("data", help="CSV file with a header row")
    parser.add_argument("--target", required=True, help="the column to predict")
    parser.add_argument("--features", help="comma-separated input columns (default: every column but the target)")
    parser.add_argument(
        "--z", help="GPX only: comma-separated explanation columns (default: the features, z = x)", default=None
    )
    parser.add_argument(
        "--model",
        choices=("gpx", "gpr"),
        default="gpx",
        help="gpx: GPXModel, explained by its local contributions; gpr: GP regression (constant mean, "
        "ARD RBF kernel), explained by integrated gradients (default: gpx)",
    )
    parser.add_argument(
        "--iterations", type=int, default=100, help="L-BFGS iterations of the marginal-likelihood fit (default 100)"
    )
    parser.add_argument("--seed", type=int, default=0, help="torch random seed (default 0)")
    parser.add_argument(
        "--nan",
        choices=NAN_POLICIES,
        default="error",
        help="rows with missing values: error (default), drop them, or fill features with column means "
        "(rows without a target are then dropped)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--out", required=True, help="the model file to write (e.g. model.pt)")
    parser.set_defaults(run=run)
    return parser


def _fit_gpr(model: StandardGPR, iterations: int, progress: bool) -> list[float]:
    """L-BFGS (strong Wolfe) on the exact marginal likelihood per sample; returns the losses."""
    import gpytorch
    from tqdm.auto import tqdm

    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=iterations, line_search_fn="strong_wolfe")
    history: list[float] = []
    bar = tqdm(total=iterations, desc="GPR fit (lbfgs)", unit="it", disable=not progress)

    def closure():
        opt.zero_grad()
        loss = -mll(model(*model.train_inputs), model.train_targets)
        loss.backward()
        history.append(loss.item())
        bar.n = min(opt.state[opt._params[0]].get("n_iter", 0), iterations)
        bar.set_postfix(loss=f"{history[-1]:.4f}", refresh=False)
        bar.refresh()
        return loss

    try:
        opt.step(closure)
    finally:
        bar.close()
    model.eval()
    return history


def run(args: argparse.Namespace) -> int:
    if args.iterations < 1:
        raise CLIError(f"--iterations must be a positive integer, got {args.iterations}")
    check_output_path(args.out)  # before the fit, not after it
    table = read_csv(args.data)
    table.require([args.target], "target column")
    features = split_names(args.features) or [name for name in table.header if name != args.target]
    if not features:
        raise CLIError(f"{args.data}: no feature columns besides the target {args.target!r}")
    if args.target in features:
        raise CLIError(f"the target {args.target!r} is also listed in --features")
    z_names = split_names(args.z)
    if z_names is not None and args.model != "gpx":
        raise CLIError("--z (separate explanation features) needs --model gpx")
    if z_names is not None and args.target in z_names:
        raise CLIError(f"the target {args.target!r} is also listed in --z")
    for names, flag in ((features, "--features"), (z_names or [], "--z")):
        dup = sorted({name for name in names if names.count(name) > 1})
        if dup:
            raise CLIError(f"{flag} names {', '.join(map(repr, dup))} more than once")
    columns = list(dict.fromkeys([*features, *(z_names or [])]))
    table.require(columns, "feature column")
    try:
        values = table.numeric(columns)
    except CLIError as err:
        if args.features is None:
            hint = "the features default to every column but the target; choose them with --features"
            raise CLIError(f"{err} ({hint})") from None
        raise
    y = table.numeric([args.target])[:, 0]
    y_ok = ~np.isnan(y)
    if not y_ok.all() and args.nan == "error":
        where = np.flatnonzero(~y_ok)
        raise CLIError(
            f"{args.data}: missing/NaN values in target column {args.target!r}: {where.size} row(s) "
            f"({', '.join(map(str, where[:5]))}{', ...' if where.size > 5 else ''}); pass --nan drop or --nan mean "
            "(either drops rows without a target)"
        )
    if not y_ok.all():
        print(f"note: dropped {int((~y_ok).sum())} row(s) without a target value", file=sys.stderr)
    values, y = values[y_ok], y[y_ok]
    values, kept = handle_nan(values, columns, args.nan, args.data)
    y = y[kept]
    if args.nan == "drop" and kept.size < y_ok.sum():
        print(f"note: --nan drop dropped {int(y_ok.sum()) - kept.size} row(s) with missing features", file=sys.stderr)
    if y.size < 3:
        raise CLIError(f"{args.data}: {y.size} usable row(s); fitting needs at least 3")

    x_raw = values[:, [columns.index(name) for name in features]]
    z_raw = None if z_names is None else values[:, [columns.index(name) for name in z_names]]
    x_mean, x_std = standardise(x_raw)
    (y_mean,), (y_std,) = standardise(y[:, None])
    z_mean, z_std = (x_mean, x_std) if z_raw is None else standardise(z_raw)
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    train_x = as_tensor((x_raw - x_mean) / x_std)
    train_y = as_tensor((y - y_mean) / y_std)
    train_z = None if z_raw is None else as_tensor((z_raw - z_mean) / z_std)

    torch.manual_seed(args.seed)
    try:
        if args.model == "gpx":
            from .. import GPXModel

            model = GPXModel(train_x, train_y, train_z, feature_names=z_names or features)
            model.fit(max_iter=args.iterations, progress=not args.quiet)
            history = list(model.fit_history)
        else:
            model = StandardGPR(train_x, train_y)
            history = _fit_gpr(model, args.iterations, progress=not args.quiet)
    except MemoryError as err:  # GPX's memory check names the scalable alternatives
        raise CLIError(f"not enough memory for an exact fit on {y.size} rows: {err}") from None
    final_loss = history[-1] if history else float("nan")
    if not math.isfinite(final_loss):
        raise CLIError(f"the fit ended with a non-finite loss ({final_loss}); nothing was written")

    payload = {
        "kind": args.model,
        "state_dict": {key: value.detach().cpu() for key, value in model.state_dict().items()},
        "train_x": train_x,
        "train_y": train_y,
        "feature_names": features,
        "z_names": z_names or features,
        "target_name": args.target,
        "x_mean": as_tensor(x_mean),
        "x_std": as_tensor(x_std),
        "z_mean": as_tensor(z_mean),
        "z_std": as_tensor(z_std),
        "y_mean": float(y_mean),
        "y_std": float(y_std),
        "n": int(y.size),
        "final_loss": float(final_loss),
        "iterations": len(history),
    }
    if train_z is not None:
        payload["train_z"] = train_z
    save_payload(payload, args.out)
    z_text = "" if z_names is None else f", z = {','.join(z_names)}"
    print(
        f"fitted {args.model} on n = {y.size} rows, features = {','.join(features)}{z_text}, target = {args.target}; "
        f"final loss (negative log marginal likelihood per row, standardised) = {final_loss:.4f}; saved {args.out}"
    )
    return 0
