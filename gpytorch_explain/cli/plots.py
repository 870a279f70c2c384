#!/usr/bin/env python3
r"""PNG plots for ``gpytorch-explain explain --plots``: one bar chart per row and a summary over all rows.

matplotlib is imported only here, with the non-interactive ``Agg`` backend; without it the command stops with a
one-line error before any work is done. Error bars are ±1 posterior std, and every plot says so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import numpy as np

from .dataio import CLIError, atomic_path

__all__ = ["require_matplotlib", "row_plot", "summary_plot", "write_plots"]


def require_matplotlib():
    """``matplotlib.pyplot`` (Agg backend), or :class:`CLIError` saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError("--plots needs matplotlib: pip install 'gpytorch-explain[plot]'") from None
    return plt


def _file_name(row_id: str) -> str:
    """A safe file name for a row id (letters, digits, ``-``, ``_``, ``.``)."""
    return "row_" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", row_id).strip("._") or "id") + ".png"


def row_plot(path: str, row_id: str, names: Sequence[str], result: dict, i: int, target: str, what: str) -> None:
    """Horizontal bars of row ``i``'s contributions, largest magnitude on top, error bars ±1 posterior std."""
    plt = require_matplotlib()
    mean, std = result["contributions"][i], result["contributions_std"][i]
    order = np.argsort(-np.abs(mean))[::-1]
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(order) + 1.8))
    try:
        colors = ["tab:red" if v > 0 else "tab:blue" for v in mean[order]]
        ax.barh(range(len(order)), mean[order], xerr=std[order], color=colors, capsize=3, alpha=0.85)
        ax.set_yticks(range(len(order)))
        ax.set_yticklabels([names[j] for j in order])
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel(f"{what} to {target} (error bars: ±1 posterior std)")
        ax.set_title(
            f"row {row_id}: prediction {result['prediction'][i]:.4g} ± {result['prediction_std'][i]:.3g} "
            f"(±1 std, predictive)\n= baseline {result['baseline'][i]:.4g} + sum of bars",
            fontsize=9,
        )
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100)
    finally:
        plt.close(fig)


def summary_plot(path: str, names: Sequence[str], result: dict, target: str, what: str) -> None:
    """Two panels over all rows: mean |contribution| per feature, and every row's contribution ±1 std per feature."""
    plt = require_matplotlib()
    mean, std = result["contributions"], result["contributions_std"]
    importance = np.abs(mean).mean(0)
    order = np.argsort(importance)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.4 * len(names) + 2.0), sharey=True)
    try:
        pos = np.arange(len(order))
        left.barh(pos, importance[order], color="tab:gray")
        left.set_yticks(pos)
        left.set_yticklabels([names[j] for j in order])
        left.set_xlabel(f"mean |{what}| over {mean.shape[0]} rows ({target} units)")
        rng = np.random.default_rng(0)
        for k, j in enumerate(order):
            offsets = k + rng.uniform(-0.25, 0.25, size=mean.shape[0])
            right.errorbar(mean[:, j], offsets, xerr=std[:, j], fmt="o", markersize=3, alpha=0.6, elinewidth=0.8)
        right.axvline(0.0, color="black", linewidth=0.8)
        right.set_xlabel(f"{what} per row (error bars: ±1 posterior std)")
        fig.suptitle(f"{what} to {target}: summary over {mean.shape[0]} rows", fontsize=10)
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100)
    finally:
        plt.close(fig)


def write_plots(folder: str, ids: Sequence[str], names: Sequence[str], result: dict, target: str, what: str) -> None:
    """``row_<id>.png`` per row and ``summary.png`` in ``folder`` (each file written atomically)."""
    bases = [_file_name(row_id) for row_id in ids]
    # names compared case-insensitively (macOS and Windows file systems); every id's own name is taken, so that a
    # renamed file never takes a later id's name
    taken = {b.lower() for b in bases}
    used: set[str] = set()
    for i, (row_id, name) in enumerate(zip(ids, bases, strict=True)):
        if name.lower() in used:  # two ids that sanitise alike: the first free row_<id>_<k>.png
            k = 2
            while f"{name[:-4]}_{k}.png".lower() in used | taken:
                k += 1
            name = f"{name[:-4]}_{k}.png"
        used.add(name.lower())
        row_plot(os.path.join(folder, name), row_id, names, result, i, target, what)
    summary_plot(os.path.join(folder, "summary.png"), names, result, target, what)
