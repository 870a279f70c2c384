#!/usr/bin/env python3
r"""Stability of local explanations over neighbouring test samples (GPX paper eq. (19), after Melis &
Jaakkola 2018)."""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np

from ._arrays import as_array, as_real

__all__ = ["stability"]

#: a spread of the weights below this fraction of their magnitude is round-off, not variation
_ROUND_OFF = 1e-12


def stability(
    x,
    weights,
    z=None,
    eps: float = 0.05,
    reduction: Literal["mean", "none"] = "mean",
    standardise: Literal["column", "global"] = "column",
) -> float | np.ndarray:
    r"""Local Lipschitz estimate of the weights over the test set (GPX paper, eq. (19)). Lower is better.

    .. math::

        L(\mathbf x_i, \mathbf z_i) = \max_{i' \in \mathcal B_\epsilon(i)}
            \frac{\|\tilde{\mathbf w}_{i'} - \tilde{\mathbf w}_i\|_2}{\|\mathbf z_{i'} - \mathbf z_i\|_2},
        \qquad
        \mathcal B_\epsilon(i) = \Big\{ i' \ne i : \tfrac{1}{D}\|\mathbf x_{i'} - \mathbf x_i\|_2 < \epsilon \Big\},

    and the score is the mean of :math:`L` over the test samples. :math:`D` is the dimension of
    :math:`\mathbf x` (the paper's :math:`m`), and the neighbourhood is the test set itself.

    Choices the paper leaves open:

    - **Standardised weights** :math:`\tilde{\mathbf w}`: each weight column is standardised over the
      :math:`m` given samples, :math:`\tilde w_{il} = (w_{il} - \bar w_l)/s_l` with the population std
      :math:`s_l` (ddof = 0). A column with :math:`s_l = 0` (a global weight; also :math:`s_l` within
      :math:`10^{-12}` of the column's largest :math:`|w|`, round-off) becomes 0, so global models score 0, as the
      paper notes. Only :math:`1/s_l` matters (differences cancel the shift).
      ``standardise="global"`` divides all weights by one std :math:`s` taken over every entry of the
      :math:`m\times d` array instead (the paper's wording fits both; on a Fish split the GPX score was 2.05
      per column and 1.51 global, the paper reports 1.497 ± 0.075, see ``benchmarks/results/paper_tables.md``).
    - **Self and duplicates**: :math:`i' = i` is excluded, and so is any neighbour with
      :math:`\mathbf z_{i'} = \mathbf z_i` (the ratio is 0/0 or infinite: duplicated rows exist, e.g. in Wine).
    - **No neighbour**: a sample whose :math:`\mathcal B_\epsilon` is empty (after the exclusions) has no
      :math:`L`; it is left out of the mean, with a ``RuntimeWarning`` that counts such samples (``nan`` with
      ``reduction="none"``, silently). If no sample has a neighbour the result is ``nan`` with a ``RuntimeWarning``.

    :param x: test inputs ``(m, D)`` defining the neighbourhoods.
    :param weights: the local weights ``(m, d)`` (for GPX the posterior mean weights, not the contributions).
    :param z: explanation features ``(m, d)``; ``None`` means ``z = x``.
    :param eps: neighbourhood radius :math:`\epsilon` (the paper uses 0.05); a number or a 0-d array or tensor.
    :param reduction: ``"mean"`` (a float, mean over samples with a neighbour) or ``"none"`` (``(m,)``).
    :param standardise: ``"column"`` (default: each weight column by its own std) or ``"global"`` (all
        weights by one std; global models still score 0, their rows being equal).

    Example:
        >>> import numpy as np
        >>> x = np.array([[0.0, 0.0], [0.04, 0.03], [5.0, 5.0]])
        >>> w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> stability(x, w, eps=0.05, reduction="none").round(4)
        array([60., 60., nan])
    """
    xa = as_array("x", x, (2,))
    m, D = xa.shape
    w = as_array("weights", weights, (2,))
    if w.shape[0] != m:
        raise ValueError(f"weights must have one row per sample of x ({m}), got shape {w.shape}.")
    za = xa if z is None else as_array("z", z, (2,))
    if za.shape != (m, w.shape[1]):
        raise ValueError(f"z must have shape (m, d) = {(m, w.shape[1])} matching weights, got {za.shape}.")
    eps = as_real("eps", eps)
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a positive finite number, got {eps}.")
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}.")
    # a spread at round-off level of the weights' magnitude counts as none (a global weight computed per row)
    if standardise == "column":
        s = w.std(0)
        varies = s > _ROUND_OFF * np.abs(w).max(0)
        wt = np.where(varies, (w - w.mean(0)) / np.where(varies, s, 1.0), 0.0)
    elif standardise == "global":
        s_all = w.std()
        wt = (w - w.mean()) / s_all if s_all > _ROUND_OFF * np.abs(w).max() else np.zeros_like(w)
    else:
        raise ValueError(f"standardise must be 'column' or 'global', got {standardise!r}.")
    out = np.full(m, np.nan)
    for i in range(m):  # one row at a time keeps memory O(m·D)
        dx = np.sqrt(((xa - xa[i]) ** 2).sum(1)) / D
        dz = np.sqrt(((za - za[i]) ** 2).sum(1))
        nb = (dx < eps) & (dz > 0)
        nb[i] = False
        if nb.any():
            dw = np.sqrt(((wt[nb] - wt[i]) ** 2).sum(1))
            out[i] = (dw / dz[nb]).max()
    if reduction == "none":
        return out
    if np.isnan(out).all():
        warnings.warn(
            f"stability: none of the {m} samples has a neighbour within eps = {eps} (distance ||x' - x||/D); "
            "returning nan. Use a larger eps or more test samples.",
            RuntimeWarning,
            stacklevel=2,
        )
        return float("nan")
    missing = int(np.isnan(out).sum())
    if missing:
        warnings.warn(
            f"stability: {missing} of the {m} samples have no neighbour within eps = {eps} (distance ||x' - x||/D) "
            f"and are left out of the mean, which is over the other {m - missing}.",
            RuntimeWarning,
            stacklevel=2,
        )
    return float(np.nanmean(out))
