#!/usr/bin/env python3
r"""Feature-removal metrics: faithfulness and sufficiency (GPX paper, Yoshikawa & Iwata, §5.2).

"Removing" feature :math:`j` of a sample :math:`\mathbf x` means replacing :math:`x_j` by the baseline value
:math:`b_j`. The paper does not say which value replaces a removed feature; here it is the ``baseline`` argument
(default: the column mean of the samples passed, which for standardised data near the training mean is ≈ 0; pass
the training mean to make the scores independent of the batch). For a model whose
explanation features are its inputs (GPX with :math:`\mathbf z = \mathbf x`) the removal changes both, and
``predict_fn`` sees the changed input.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ._arrays import as_array, as_positive_int, call_predict, resolve_baseline

__all__ = ["faithfulness", "sufficiency"]


def _pearson_rows(a: np.ndarray, b: np.ndarray, scale_b: np.ndarray | None = None) -> np.ndarray:
    """Row-wise Pearson correlation; a row in which either vector is constant gives NaN (``scale_b``: the magnitude
    ``b``'s round-off is relative to, per row; default its own largest entry)."""
    # a spread at round-off level of the row's magnitude counts as constant (e.g. a row of equal values)
    scale_a = np.abs(a).max(1)
    scale_b = np.maximum(np.abs(b).max(1), 0.0 if scale_b is None else scale_b)
    a = a - a.mean(1, keepdims=True)
    b = b - b.mean(1, keepdims=True)
    na = np.sqrt((a * a).sum(1))
    nb = np.sqrt((b * b).sum(1))
    tol = 1e-13 * np.sqrt(a.shape[1])
    const = (na <= tol * scale_a) | (nb <= tol * scale_b)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * b).sum(1) / (na * nb)
    r = np.clip(r, -1.0, 1.0)
    r[const] = np.nan
    return r


def faithfulness(predict_fn: Callable, x, contributions, baseline=None) -> np.ndarray:
    r"""Faithfulness of contributions: Pearson correlation of each feature's contribution with the drop in
    prediction when that feature is removed.

    For sample :math:`i` and feature :math:`j`, let :math:`\mathbf x_i^{(-j)}` be :math:`\mathbf x_i` with
    :math:`x_{ij}` replaced by :math:`b_{ij}`, and :math:`\Delta_{ij} = f(\mathbf x_i) - f(\mathbf x_i^{(-j)})`.
    Then

    .. math::

        \mathrm{faithfulness}_i = \operatorname{corr}_{j=1..D}\big(\phi_{ij},\ \Delta_{ij}\big)
        = \frac{\sum_j (\phi_{ij} - \bar\phi_i)(\Delta_{ij} - \bar\Delta_i)}
               {\sqrt{\sum_j (\phi_{ij} - \bar\phi_i)^2}\sqrt{\sum_j (\Delta_{ij} - \bar\Delta_i)^2}},

    the Pearson correlation over the :math:`D` features (GPX paper §5.2, after Melis & Jaakkola 2018 and
    Bhatt et al. 2020). Higher is better; a perfectly additive model explained by its own terms scores 1.

    Choices the papers leave open:

    - **Baseline** (the paper does not say which value replaces a removed feature): ``None`` uses the column mean
      of ``x``, so a sample's score depends on the batch it is passed in, and a single sample (``m = 1``) is an
      error (its mean is itself); pass the training mean (``(D,)`` or ``(1, D)``) or per-sample baselines
      (``(m, D)``) for scores that do not. A scalar (e.g. ``0.0``) is the baseline of every feature.
    - **Degenerate rows**: if a sample's contributions or its prediction changes are constant across features
      (e.g. all zero, or a global model with a feature at its baseline), the correlation is undefined and that
      sample's score is ``nan`` (a ``RuntimeWarning`` says how many). Aggregate with ``np.nanmean``.
    - Features whose value already equals the baseline have :math:`\Delta_{ij} = 0` and are kept, as are
      features with zero contribution: every one of the :math:`D` features enters the correlation.
    - The prediction change is :math:`f(\mathbf x) - f(\mathbf x^{(-j)})` (positive when removing the feature
      lowers the prediction), so contributions that add up to the prediction correlate positively.

    :param predict_fn: maps an ``(n, D)`` input (a tensor of ``x``'s dtype/device if ``x`` is a tensor, else a
        numpy array) to ``n`` predictions. Called once on all ``m·(D+1)`` perturbed inputs.
    :param x: inputs, ``(m, D)`` with :math:`D \ge 2`.
    :param contributions: ``(m, D)``, the explainer's contribution (or relevance) of each feature.
    :param baseline: ``None``, a scalar (every feature), ``(D,)`` or ``(1, D)`` (every sample) or ``(m, D)``;
        numpy or torch.
    :return: ``(m,)`` numpy array of correlations in [-1, 1] (or ``nan``).

    Example:
        >>> import numpy as np
        >>> w = np.array([1.0, -2.0, 0.5])
        >>> x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
        >>> faithfulness(lambda a: a @ w, x, x * w, baseline=np.zeros(3)).round(6)
        array([1., 1.])
    """
    xa = as_array("x", x, (2,))
    m, D = xa.shape
    if D < 2:
        raise ValueError(f"faithfulness needs at least 2 features to correlate, got D = {D}.")
    c = as_array("contributions", contributions, (2,))
    if c.shape != (m, D):
        raise ValueError(f"contributions must have the shape of x, {(m, D)}, got {c.shape}.")
    b = resolve_baseline(baseline, xa)
    removed = np.repeat(xa[:, None, :], D, axis=1)  # (m, D, D): [i, j] = x_i with feature j removed
    idx = np.arange(D)
    removed[:, idx, idx] = b
    points = np.concatenate([xa, removed.reshape(m * D, D)], 0)
    pred = call_predict(predict_fn, points, x)
    delta = pred[:m, None] - pred[m:].reshape(m, D)
    # prediction changes at round-off level of the predictions themselves are none (a constant model)
    magnitude = np.maximum(np.abs(pred[:m]), np.abs(pred[m:]).reshape(m, D).max(1))
    r = _pearson_rows(c, delta, scale_b=magnitude)
    bad = int(np.isnan(r).sum())
    if bad:
        warnings.warn(
            f"faithfulness: {bad} of {m} samples have constant contributions or constant prediction changes "
            "across features; their correlation is undefined and returned as nan.",
            RuntimeWarning,
            stacklevel=2,
        )
    return r


def _topk_order(scores: np.ndarray) -> np.ndarray:
    """Feature indices by decreasing ``|score|``; ties go to the lower index (stable sort)."""
    return np.argsort(-np.abs(scores), axis=-1, kind="stable")


def sufficiency(predict_fn: Callable, x, contributions, baseline=None, k: int | Sequence[int] = 1) -> np.ndarray:
    r"""Sufficiency at :math:`k`: how far the prediction moves when only the :math:`k` most important features are
    kept and all others are removed (set to the baseline). Lower is better.

    Let :math:`S_i^k` be the indices of the :math:`k` largest :math:`|\phi_{ij}|` and
    :math:`\mathbf x_i^{[k]}` the input with :math:`x_{ij}` for :math:`j\in S_i^k` and :math:`b_{ij}` otherwise:

    .. math::

        \mathrm{sufficiency}_i(k) = \big|f(\mathbf x_i) - f(\mathbf x_i^{[k]})\big|

    (GPX paper §5.2 and Figure 2, evaluated there at :math:`k = 1, \dots, 10`).

    Choices the paper leaves open:

    - **Ties** in :math:`|\phi_{ij}|` (including zero contributions) are broken in favour of the lower feature
      index (stable sort), so the result is deterministic.
    - **k ≥ D** keeps every feature, so the score is exactly 0 (Figure 2 plots :math:`k` up to 10 also for
      datasets with fewer features).
    - **Baseline**: as in :func:`faithfulness` (``None`` = column mean of ``x``).

    :param predict_fn: as in :func:`faithfulness`.
    :param x: ``(m, D)``; :param contributions: ``(m, D)``.
    :param baseline: ``None``, a scalar, ``(D,)``, ``(1, D)`` or ``(m, D)``, as in :func:`faithfulness`.
    :param k: a positive integer (an int, a numpy integer or a 0-d integer array or tensor), giving an ``(m,)``
        result, or a sequence (or 1-D array or tensor) of them, giving ``(len(k), m)`` (row ``r`` for ``k[r]``),
        all from one call of ``predict_fn``.
    :return: numpy array of absolute prediction changes.

    Example:
        >>> import numpy as np
        >>> w = np.array([3.0, -1.0, 0.5])
        >>> x = np.ones((1, 3))
        >>> sufficiency(lambda a: a @ w, x, x * w, baseline=np.zeros(3), k=[1, 2, 3])
        array([[0.5],
               [0.5],
               [0. ]])
    """
    xa = as_array("x", x, (2,))
    m, D = xa.shape
    c = as_array("contributions", contributions, (2,))
    if c.shape != (m, D):
        raise ValueError(f"contributions must have the shape of x, {(m, D)}, got {c.shape}.")
    scalar = np.isscalar(k) or ((isinstance(k, np.ndarray) or torch.is_tensor(k)) and k.ndim == 0)
    try:
        ks = [k] if scalar else list(k)
    except TypeError as exc:
        raise ValueError(f"k must be a positive integer (or a sequence of them), got {k!r}.") from exc
    if not ks:
        raise ValueError("k is an empty sequence.")
    ks = [as_positive_int("k (or each entry of a sequence k)", kk) for kk in ks]
    b = resolve_baseline(baseline, xa)
    order = _topk_order(c)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(D)[None, :].repeat(m, 0), axis=1)  # rank[i, j] of feature j
    kept = [np.where(rank < kk, xa, b) for kk in ks]
    points = np.concatenate([xa, *kept], 0)
    pred = call_predict(predict_fn, points, x)
    out = np.abs(pred[None, :m] - pred[m:].reshape(len(ks), m))
    return out[0] if scalar else out
