#!/usr/bin/env python3
"""Plots of explanations over many samples: a summary (box or beeswarm per feature, with uncertainty) and
weight maps for image inputs (the GPX paper's Digits figures). matplotlib is imported only when plotting."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import ExplainerOutput, to_numpy

__all__ = ["plot_summary", "plot_weight_maps"]


def _horizontal(ax) -> dict:
    """Keyword for a horizontal box plot: ``orientation`` (Matplotlib >= 3.10, where ``vert`` is deprecated), else
    ``vert=False``."""
    import inspect

    params = inspect.signature(ax.boxplot).parameters
    return {"orientation": "horizontal"} if "orientation" in params else {"vert": False}


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("Plotting needs matplotlib (pip install matplotlib).") from exc
    return plt


def _arrays(contributions, std):
    if isinstance(contributions, ExplainerOutput):
        contributions, std = contributions.contributions, contributions.std if std is None else std
    c = to_numpy(contributions)
    s = to_numpy(std)
    if c is None or c.ndim != 2:
        raise ValueError(f"contributions must be (m, D), got {None if c is None else c.shape}.")
    if s is not None and s.shape != c.shape:
        raise ValueError(f"std must have the shape of contributions {c.shape}, got {s.shape}.")
    return c, s


def plot_summary(
    contributions,
    std=None,
    x=None,
    feature_names: Sequence[str] | None = None,
    kind: str = "beeswarm",
    max_features: int = 20,
    ax=None,
    seed: int = 0,
):
    r"""Contributions of many samples, one row per feature, features sorted by mean :math:`|\phi|`.

    ``kind="beeswarm"``: one dot per sample (vertical jitter), coloured by the feature's value ``x`` when
    given, with each dot's ±1 std as a thin horizontal bar when ``std`` is given. ``kind="box"``: a box plot
    of each feature's contributions, with the mean ±1 std (averaged over samples) drawn beside it.

    :param contributions: ``(m, D)`` array/tensor or an :class:`ExplainerOutput` (its ``std`` is used).
    :param std: ``(m, D)`` posterior std of the contributions (optional).
    :param x: ``(m, D)`` feature values for colouring the beeswarm (optional).
    :param ax: a matplotlib axis (a new figure otherwise). :return: the axis.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import numpy as np
        >>> c = np.random.default_rng(0).normal(size=(50, 3))
        >>> ax = plot_summary(c, std=0.1 * np.abs(c), feature_names=["a", "b", "c"])
        >>> ax.get_xlabel()
        'contribution (error bars: ±1 std)'
    """
    c, s = _arrays(contributions, std)
    m, D = c.shape
    names = list(feature_names) if feature_names is not None else [f"x{j}" for j in range(D)]
    if len(names) != D:
        raise ValueError(f"feature_names has {len(names)} names for {D} features.")
    if kind not in ("beeswarm", "box"):
        raise ValueError(f"kind must be 'beeswarm' or 'box', got {kind!r}.")
    xv = to_numpy(x)
    if xv is not None and xv.shape != c.shape:
        raise ValueError(f"x must have the shape of contributions {c.shape}, got {xv.shape}.")
    order = np.argsort(-np.abs(c).mean(0), kind="stable")[:max_features]
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.4 * len(order) + 1.2))
    rng = np.random.default_rng(seed)
    for row, j in enumerate(order[::-1]):
        if kind == "box":
            ax.boxplot(c[:, j], positions=[row], widths=0.6, showfliers=False, **_horizontal(ax))
            if s is not None:
                ax.errorbar(c[:, j].mean(), row + 0.38, xerr=s[:, j].mean(), fmt="o", color="C3", ms=3, capsize=2)
            continue
        yj = row + rng.uniform(-0.3, 0.3, size=m)
        if s is not None:
            ax.hlines(yj, c[:, j] - s[:, j], c[:, j] + s[:, j], color="0.6", lw=0.6, alpha=0.6)
        if xv is not None:
            v = xv[:, j]
            span = np.ptp(v)
            colour = (v - v.min()) / span if span > 0 else np.full(m, 0.5)
            sc = ax.scatter(c[:, j], yj, c=colour, cmap="coolwarm", s=8, vmin=0, vmax=1, zorder=3)
        else:
            ax.scatter(c[:, j], yj, s=8, color="C0", zorder=3)
    if kind == "beeswarm" and xv is not None:
        cb = plt.colorbar(sc, ax=ax)
        cb.set_label("feature value (low → high)")
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([names[j] for j in order[::-1]])
    ax.set_xlabel("contribution" + (" (error bars: ±1 std)" if s is not None else ""))
    return ax


def plot_weight_maps(
    weights,
    image_shape: tuple[int, int] = (8, 8),
    std=None,
    images=None,
    titles: Sequence[str] | None = None,
    max_samples: int = 6,
):
    r"""Per-sample weight maps for image inputs (e.g. GPX on Digits, 8 × 8): red positive, blue negative,
    colour scale symmetric about 0 and shared by all maps. Optional rows: the input images (grey) above and
    the weights' posterior std (±1 std) below.

    :param weights: ``(m, H·W)`` local weights (or contributions) per sample.
    :param std: ``(m, H·W)`` posterior std (optional). :param images: ``(m, H·W)`` inputs (optional).
    :return: the figure.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import numpy as np
        >>> fig = plot_weight_maps(np.random.default_rng(0).normal(size=(3, 64)), std=np.ones((3, 64)))
        >>> len(fig.axes) >= 6
        True
    """
    w = to_numpy(weights)
    H, W = image_shape
    if w is None or w.ndim != 2 or w.shape[1] != H * W:
        raise ValueError(
            f"weights must be (m, {H * W}) for image_shape {image_shape}, got {None if w is None else w.shape}."
        )
    k = min(len(w), max_samples)
    rows = [
        ("input", to_numpy(images), "gray_r", None),
        ("weights", w, "bwr", "sym"),
        ("±1 std of weights", to_numpy(std), "viridis", "pos"),
    ]
    rows = [r for r in rows if r[1] is not None]
    for name, arr, *_ in rows:
        if arr.shape != w.shape:
            raise ValueError(f"{name} must have the shape of weights {w.shape}, got {arr.shape}.")
    plt = _pyplot()
    fig, axes = plt.subplots(len(rows), k, figsize=(1.8 * k + 1, 1.9 * len(rows)), squeeze=False)
    for r, (name, arr, cmap, scale) in enumerate(rows):
        vmax = np.abs(arr[:k]).max() if scale else None
        kw = {"vmin": -vmax, "vmax": vmax} if scale == "sym" else ({"vmin": 0, "vmax": vmax} if scale else {})
        for i in range(k):
            im = axes[r, i].imshow(arr[i].reshape(H, W), cmap=cmap, **kw)
            axes[r, i].set_xticks([])
            axes[r, i].set_yticks([])
            if r == 0 and titles is not None:
                axes[r, i].set_title(titles[i], fontsize=8)
        axes[r, 0].set_ylabel(name, fontsize=8)
        fig.colorbar(im, ax=list(axes[r]), shrink=0.8)
    return fig
