#!/usr/bin/env python3
"""Plots of attribution GPs (matplotlib, an optional extra)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from gpytorch.distributions import MultitaskMultivariateNormal

__all__ = ["plot_attribution_bars", "plot_attribution_path"]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("Plotting needs matplotlib: pip install 'gpytorch-explain[plot]'") from err
    return plt


def plot_attribution_bars(
    attributions: MultitaskMultivariateNormal,
    i: int = 0,
    feature_names: Sequence[str] | None = None,
    ax=None,
    num_std: float = 1.0,
    top_k: int | None = None,
):
    """Bar chart of point ``i``'s attributions with error bars of ``± num_std`` posterior standard deviations.

    The project's convention is ±1 std (the default); the axis label always states the width, e.g.
    "attribution (error bars: ±1 posterior std, latent)". The std is the attribution GP's: the uncertainty of
    the latent function's attribution, without observation noise.

    :param attributions: The output of :class:`~gpytorch_explain.PosteriorIntegratedGradients` or
        :class:`~gpytorch_explain.PosteriorGradient`, mean ``(m, D)``.
    :return: The matplotlib Axes.

    Example:
        >>> import torch, matplotlib
        >>> matplotlib.use("Agg")
        >>> from gpytorch.distributions import MultitaskMultivariateNormal
        >>> from gpytorch_explain.attribution import plot_attribution_bars
        >>> mvn = MultitaskMultivariateNormal(torch.tensor([[0.5, -0.2]]), torch.eye(2) * 0.01)
        >>> ax = plot_attribution_bars(mvn, 0, ["a", "b"])
        >>> len(ax.patches)
        2
    """
    plt = _pyplot()
    with torch.no_grad():
        mean = attributions.mean[..., i, :].detach().cpu()
        std = attributions.variance[..., i, :].detach().clamp_min(0).sqrt().cpu()
    if mean.dim() != 1:
        raise ValueError("plot_attribution_bars expects a non-batch attribution distribution.")
    names = list(feature_names) if feature_names is not None else [f"x{j}" for j in range(mean.numel())]
    if len(names) != mean.numel():
        raise ValueError(f"{len(names)} feature names for {mean.numel()} features.")
    order = torch.argsort(mean.abs(), descending=True)
    if top_k is not None:
        order = order[:top_k]
    order = order.flip(0).tolist()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.32 * len(order) + 1.2))
    values = [mean[j].item() for j in order]
    ax.barh(
        range(len(order)),
        values,
        xerr=[num_std * std[j].item() for j in order],
        color=["tab:red" if v > 0 else "tab:blue" for v in values],
        capsize=3,
        alpha=0.85,
    )
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([names[j] for j in order])
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel(f"attribution (error bars: ±{num_std:g} posterior std, latent)")
    ax.figure.tight_layout()
    return ax


def plot_attribution_path(
    ig,
    x: torch.Tensor,
    num: int = 50,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    ax=None,
    num_std: float = 1.0,
):
    r"""Attributions along the straight path from the baseline to ``x`` with bands of ``± num_std`` posterior stds
    (±1 std by default, the project's convention; the axis label and the legend title state the width).

    Evaluates the attribution GP at :math:`\mathbf b + t(\mathbf x - \mathbf b)` for ``num``
    values of :math:`t \in [0, 1]` (the figure of Seitz et al.'s synthetic example: the
    uncertainty grows with the distance from the baseline). Needs a single baseline.

    :param ig: An :class:`~gpytorch_explain.PosteriorIntegratedGradients`.
    :param x: The end point, ``(D,)``.
    :return: The matplotlib Axes.
    """
    plt = _pyplot()
    if ig.baselines.size(0) != 1:
        raise ValueError("plot_attribution_path needs a single baseline.")
    if x.dim() != 1:
        raise ValueError(f"x must be a single point (D,), got shape {tuple(x.shape)}.")
    b = ig.baselines[0]
    t = torch.linspace(0, 1, num, dtype=x.dtype, device=x.device)
    pts = b + t.unsqueeze(-1) * (x - b)
    with torch.no_grad():
        attr = ig(pts)
        mean = attr.mean.detach().cpu()
        std = attr.variance.detach().clamp_min(0).sqrt().cpu()
    features = list(features) if features is not None else list(range(x.numel()))
    names = list(feature_names) if feature_names is not None else [f"x{j}" for j in range(x.numel())]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    tt = t.cpu().numpy()
    for j in features:
        line = ax.plot(tt, mean[:, j].numpy(), label=names[j])[0]
        ax.fill_between(
            tt,
            (mean[:, j] - num_std * std[:, j]).numpy(),
            (mean[:, j] + num_std * std[:, j]).numpy(),
            color=line.get_color(),
            alpha=0.2,
        )
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel("path parameter t  (baseline → x)")
    ax.set_ylabel(f"attribution (bands: ±{num_std:g} posterior std, latent)")
    ax.legend(loc="best", title=f"feature (band: ±{num_std:g} std)")
    ax.figure.tight_layout()
    return ax
