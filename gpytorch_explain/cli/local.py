#!/usr/bin/env python3
r"""``gpytorch-explain local``: explain one row of a CSV for a saved scikit-learn model (BO-LIME with a GP surrogate).

Uses :class:`gpytorch_explain.LocalGPExplainer` with the CSV as training data (feature scales, baseline = the
training mean) and prints the relevance, the gradient mean ± 1 std and the integrated gradients ± 1 std per feature.
"""

from __future__ import annotations

import argparse
import csv
import sys
import textwrap
import warnings

import numpy as np

from .dataio import (
    MISSING,
    NAN_POLICIES,
    CLIError,
    atomic_output,
    atomic_path,
    check_input_file,
    check_output_path,
    handle_nan,
    read_csv,
)

__all__ = ["add_parser", "run"]

ACQUISITIONS = ("lcb", "ei", "pi", "mpi", "variance", "integrated_variance", "gradient")
#: the names of gpytorch_explain.local.PRESETS (listed here so that --help does not import BoTorch)
PRESET_NAMES = ("tree", "smooth_classifier")

EXAMPLES = """\
examples:
  gpytorch-explain local --sklearn model.joblib data.csv --row 3
  gpytorch-explain local --sklearn model.joblib data.csv --row 3 --target y --budget 30 --out local.csv
  gpytorch-explain local --sklearn clf.joblib data.csv --row 0 --class-index 1 --acquisition gradient --plot r0.png
  gpytorch-explain local --sklearn forest.joblib data.csv --row 3 --preset tree
  gpytorch-explain local --sklearn svc.joblib data.csv --row 0 --preset smooth_classifier

Rows count from 0 (the first line after the header). Every other column is a feature, in the order the model
was fitted on; drop the label column with --target. Classifiers are explained through predict_proba[:, k].
Columns that are not numbers (e.g. a city) are categorical features: with pandas installed the model then receives
DataFrames with the CSV's column names, as a pipeline fitted on pandas.read_csv(...) expects.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "local",
        help="explain one row for a scikit-learn model saved with joblib",
        description=textwrap.fill(
            "Explain one row of a CSV for a fitted scikit-learn estimator (saved with joblib) with a local "
            "GP surrogate (LocalGPExplainer): relevance, gradient and integrated gradients with their stds.",
            100,
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sklearn", required=True, metavar="MODEL", help="estimator saved with joblib.dump")
    parser.add_argument("data", help="CSV file of training data (header row); one of its rows is explained")
    parser.add_argument("--row", type=int, required=True, help="the row to explain (0 = first data row)")
    parser.add_argument("--budget", type=int, default=50, help="black-box calls, the row itself included (50)")
    parser.add_argument("--acquisition", choices=ACQUISITIONS, help="how samples are chosen (lcb, or the preset's)")
    parser.add_argument(
        "--preset",
        choices=PRESET_NAMES,
        help="a setting for a kind of model (gpytorch_explain.local.PRESETS): 'tree' for tree ensembles (random "
        "forests, extra trees, boosting), 'smooth_classifier' for the probability of a smooth classifier (SVC, "
        "logistic regression, MLP); --acquisition and --interval override it",
    )
    parser.add_argument(
        "--interval", type=float, help="sample within x ± INTERVAL·std of each feature (1, or the preset's)"
    )
    parser.add_argument("--target", metavar="COLUMN", help="a column to drop (e.g. the label)")
    parser.add_argument(
        "--class-index",
        type=int,
        help="explain predict_proba[:, k] (default for classifiers: 1, the second class)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--nan",
        choices=NAN_POLICIES,
        default="error",
        help="rows with missing values: error (default), drop them, or fill with column means",
    )
    parser.add_argument("--out", metavar="FILE", help="write the per-feature table to this CSV")
    parser.add_argument("--plot", metavar="FILE", help="write relevance/gradient/IG bars to this PNG")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)
    return parser


def _load_estimator(path: str):
    check_input_file(path, "model file")
    try:
        import joblib
    except ImportError:
        raise CLIError("local --sklearn needs joblib (it comes with scikit-learn): pip install scikit-learn") from None
    try:
        return joblib.load(path)
    except Exception as err:  # pickle and joblib raise many types for a file that is not theirs
        raise CLIError(f"{path}: cannot load it with joblib ({type(err).__name__}: {str(err)[:100]})") from None


def _black_box(estimator, class_index: int | None):
    from ..local import from_sklearn_classifier, from_sklearn_regressor

    is_classifier = getattr(estimator, "_estimator_type", None) == "classifier"
    try:
        from sklearn.base import is_classifier as sk_is_classifier

        is_classifier = bool(sk_is_classifier(estimator))
    except ImportError:
        pass
    try:
        if class_index is not None or is_classifier:
            k = 1 if class_index is None else class_index
            predict = from_sklearn_classifier(estimator, class_index=k)
            classes = getattr(estimator, "classes_", None)
            if classes is not None and not 0 <= k < len(classes):  # an int label past the columns: its column
                k = list(np.asarray(classes).tolist()).index(k)
            label = f"P(class = {str(classes[k])!r})" if classes is not None else f"predict_proba[:, {k}]"
            return predict, label
        return from_sklearn_regressor(estimator), "prediction"
    except (TypeError, ValueError) as err:
        raise CLIError(str(err)) from None


def _is_numeric(table, name: str) -> bool:
    """Whether every non-missing cell of column ``name`` parses as a number."""
    try:
        table.numeric([name])
    except CLIError:
        return False
    return True


def _note_filled_row(raw: np.ndarray, filled: np.ndarray, names: list[str], args: argparse.Namespace) -> None:
    """Say on stderr when ``--nan mean`` filled cells of the row being explained (``raw``: that row before)."""
    holes = np.flatnonzero(np.isnan(raw))
    if holes.size and args.nan == "mean":
        cells = ", ".join(f"{names[k]} = {filled[k]:.6g}" for k in holes[:10])
        print(
            f"warning: row {args.row} itself has missing values; --nan mean filled them with column means ({cells}), "
            "so it is explained at those values",
            file=sys.stderr,
        )


def _frame_data(table, features: list[str], text_columns: list[str], args: argparse.Namespace):
    """The feature columns as a pandas DataFrame (text columns as strings) and the row ``args.row`` of it."""
    try:
        import pandas as pd
    except ImportError:
        raise CLIError(
            f"{args.data}: column(s) {', '.join(map(repr, text_columns))} are not numeric; explaining text "
            "(categorical) columns needs pandas: pip install pandas"
        ) from None
    numeric = [name for name in features if name not in text_columns]
    raw = table.numeric(numeric)
    values, kept = handle_nan(raw, numeric, args.nan, args.data)
    keep = np.zeros(len(table), dtype=bool)
    keep[kept] = True
    for name in text_columns:
        cells = np.array([cell.strip() for cell in table.text(name)], dtype=object)
        missing = np.array([cell.lower() in MISSING for cell in cells])
        if missing.any() and args.nan != "drop":
            rows = ", ".join(str(i) for i in np.flatnonzero(missing)[:5])
            raise CLIError(
                f"{args.data}: missing values in the text column {name!r} (rows {rows}); pass --nan drop to drop "
                "those rows (--nan mean cannot fill a text column)"
            )
        keep &= ~missing
    if not keep[args.row]:
        raise CLIError(f"row {args.row} has missing values and was dropped by --nan drop")
    columns = {}
    position = {name: k for k, name in enumerate(numeric)}
    rows_kept = np.flatnonzero(keep)
    for name in features:
        if name in position:
            columns[name] = values[np.searchsorted(kept, rows_kept), position[name]]
        else:
            columns[name] = [cell.strip() for cell in np.array(table.text(name), dtype=object)[rows_kept]]
    frame = pd.DataFrame(columns, columns=features)
    if numeric:
        _note_filled_row(raw[args.row], values[int(np.flatnonzero(kept == args.row)[0])], numeric, args)
    return frame, frame.iloc[int(np.flatnonzero(rows_kept == args.row)[0])]


def _cell(result, j: int, value: float) -> str:
    """A value of the --out table: the category for a text column, else the number to full precision."""
    if result.codec is not None and j in result.codec.levels:
        return result.codec.value_text(j, value)
    return f"{float(value):.17g}"


def run(args: argparse.Namespace) -> int:
    check_output_path(args.out)
    check_output_path(args.plot)
    estimator = _load_estimator(args.sklearn)
    table = read_csv(args.data)
    if args.target is not None:
        table.require([args.target], "--target column")
    features = [name for name in table.header if name != args.target]
    if not features:
        raise CLIError(f"{args.data}: no feature columns")
    expected = getattr(estimator, "feature_names_in_", None)
    if expected is not None:
        expected = [str(name) for name in expected]
        table.require(expected, "column the model was fitted on")
        features = expected  # the model's order
    n_in = getattr(estimator, "n_features_in_", None)
    if n_in is not None and n_in != len(features):
        raise CLIError(
            f"the model expects {n_in} features but {args.data} has {len(features)} ({','.join(features)}); "
            "drop the label column with --target"
        )
    if not 0 <= args.row < len(table):
        last = len(table) - 1
        raise CLIError(f"--row {args.row} is out of range: {args.data} has {len(table)} data rows (0 to {last})")
    text_columns = [name for name in features if not _is_numeric(table, name)]
    if text_columns:
        data, x = _frame_data(table, features, text_columns, args)
    else:
        raw = table.numeric(features)
        values, kept = handle_nan(raw, features, args.nan, args.data)
        if args.row not in kept:
            raise CLIError(f"row {args.row} has missing values and was dropped by --nan drop")
        data, x = values, values[int(np.flatnonzero(kept == args.row)[0])]
        _note_filled_row(raw[args.row], x, features, args)
    predict, label = _black_box(estimator, args.class_index)

    def quiet_predict(X: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings():  # a model fitted on a DataFrame warns about numpy input at every call
            warnings.filterwarnings("ignore", message="X does not have valid feature names")
            return predict(X)

    if args.plot is not None:
        from .plots import require_matplotlib

        require_matplotlib()
    from .. import LocalGPExplainer
    from ..local import PRESETS

    settings = dict(PRESETS[args.preset]) if args.preset is not None else {}
    if args.acquisition is not None:
        settings["acquisition"] = args.acquisition
    if args.interval is not None:
        settings["interval"] = args.interval
    try:
        explainer = LocalGPExplainer(
            quiet_predict,
            data,
            budget=args.budget,
            feature_names=features,
            seed=args.seed,
            progress=not args.quiet,
            **settings,
        )
    except (ValueError, IndexError, TypeError) as err:
        raise CLIError(str(err)) from None
    try:
        with warnings.catch_warnings():  # an unseen category of x is impossible: x is a row of the training data
            result = explainer.explain(x)
    except (ValueError, TypeError) as err:  # the model's output (NaN, several outputs) or its input, named
        raise CLIError(f"explaining row {args.row}: {err}") from None
    print(f"row {args.row} (line {table.line(args.row)}) of {args.data}: {label} = {float(result.y_samples[0]):.6g}")
    print(result.summary())
    for message in result.warnings:
        print(f"warning: {message}", file=sys.stderr)
    if args.plot is not None:
        plt = require_matplotlib()
        axes = result.plot()
        try:
            with atomic_path(args.plot) as tmp:
                axes[0].figure.savefig(tmp, dpi=100)
        finally:
            plt.close(axes[0].figure)
    if args.out is not None:
        with atomic_output(args.out, newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(
                [
                    "feature",
                    "value",
                    "baseline",
                    "relevance",
                    "relevance_std",
                    "gradient_mean",
                    "gradient_std",
                    "integrated_gradients",
                    "integrated_gradients_std",
                    "gradient_from_stencil",
                ]
            )
            for j, name in enumerate(features):
                writer.writerow(
                    [name, _cell(result, j, result.x[j]), _cell(result, j, result.baseline[j])]
                    + [
                        f"{float(a[j]):.17g}"
                        for a in (
                            result.relevance,
                            result.relevance_std,
                            result.gradient_mean,
                            result.gradient_std,
                            result.integrated_gradients,
                            result.integrated_gradients_std,
                        )
                    ]
                    + [int(result.gradient_from_stencil[j])]
                )
    return 0
