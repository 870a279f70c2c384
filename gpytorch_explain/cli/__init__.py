r"""The ``gpytorch-explain`` command line, for a CSV file and no Python code.

Three subcommands (``gpytorch-explain <command> --help`` shows each one's options and examples; the same
program runs as ``python -m gpytorch_explain``):

``gpytorch-explain fit data.csv --target y [--features a,b,...] [--z ...] [--model gpx|gpr] --out model.pt``
    Standardises the features and the target (column means 0, stds 1), fits a
    :class:`~gpytorch_explain.GPXModel` (default; z = x unless ``--z`` names other explanation columns) or a GP
    regression model (``--model gpr``: constant mean, ARD RBF kernel) by L-BFGS on the exact marginal likelihood
    (``--iterations``, a progress bar unless ``--quiet``), and saves ONE model file: the fitted parameters, the
    standardised training data, the column names and the standardisation, with a format version
    (:mod:`gpytorch_explain.cli.modelfile`). Prints n, the features and the final loss.

``gpytorch-explain explain model.pt rows.csv --out explanations.csv [--plots DIR] [--row-ids COLUMN]``
    For each row, the prediction and its std and each feature's contribution and its std, in the target's units:
    GPX's local contributions :math:`w_l z_l` (``GPXModel.explain``), or for GPR the exact posterior of the
    integrated gradients from the training mean. The contributions add up to ``prediction - baseline``, the
    baseline being the prediction at the training means (:mod:`gpytorch_explain.cli.explain`). ``--plots`` writes
    ``row_<id>.png`` per row (bars with ±1 posterior std error bars) and ``summary.png`` (needs matplotlib).

``gpytorch-explain local --sklearn model.joblib data.csv --row 3 [--budget 50] [--acquisition lcb] ...``
    Explains one row for a scikit-learn estimator saved with joblib, with
    :class:`~gpytorch_explain.LocalGPExplainer` on the CSV as training data: relevance, gradient and integrated
    gradients ± 1 posterior std per feature (``--out`` CSV, ``--plot`` PNG).

Bad input (a missing file or column, a cell that is not a number, missing values without ``--nan drop|mean``, an
empty file, a model file of another format version or not a model file, a rows file without the model's
features) stops with a one-line message on stderr and exit status 2. Output files are written to a temporary file
in the same folder and moved into place at the end, so a failed run never leaves a half-written file.

Example:
    >>> from gpytorch_explain.cli import build_parser
    >>> sorted(build_parser()._subparsers._group_actions[0].choices)
    ['explain', 'fit', 'local']
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .dataio import CLIError

__all__ = ["CLIError", "build_parser", "main"]

PROG = "gpytorch-explain"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gpytorch-explain`` with its three subcommands."""
    from . import explain, fit, local

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Gaussian-process models that explain themselves, from the command line. "
        "Run `gpytorch-explain <command> --help` for a command's options and examples.",
        epilog="examples:\n  gpytorch-explain fit data.csv --target y --out model.pt\n"
        "  gpytorch-explain explain model.pt data.csv --out explanations.csv --plots plots/\n"
        "  gpytorch-explain local --sklearn model.joblib data.csv --row 3 --target y",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="{fit,explain,local}")
    subparsers.required = True
    for module in (fit, explain, local):
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gpytorch-explain`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    A :class:`CLIError` (bad input) is printed as ``gpytorch-explain <command>: error: <message>`` on stderr and
    gives status 2, as argparse does for bad options; anything else is a bug and keeps its traceback.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except CLIError as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
