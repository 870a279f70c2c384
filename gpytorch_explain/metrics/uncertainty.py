#!/usr/bin/env python3
"""Checks for explainers that return uncertainty or satisfy an additivity axiom."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from ._arrays import as_array, as_real

__all__ = ["completeness_gap", "interval_coverage"]


def interval_coverage(mean, std, truth, level: float = 0.95) -> float:
    r"""Fraction of true values inside the central Gaussian credible interval.

    .. math::

        \mathrm{coverage} = \frac{1}{N}\sum_{n} \mathbb 1\big[|t_n - \mu_n| \le q\,\sigma_n\big],
        \qquad q = \Phi^{-1}\big(\tfrac{1 + \text{level}}{2}\big)

    (:math:`q \approx 1.96` at level 0.95), over all entries of ``mean`` (any shape). ``std`` and ``truth``
    may have ``mean``'s shape or any shape that numpy broadcasts to it (e.g. a scalar ``std`` for one shared
    standard deviation); shapes that do not broadcast to ``mean``'s are an error. The interval is closed, so an
    entry with :math:`\sigma_n = 0` counts as covered only if :math:`t_n = \mu_n`. A calibrated explainer
    covers about ``level``.

    Example:
        >>> import numpy as np
        >>> interval_coverage(np.zeros(4), np.ones(4), np.array([0.5, -1.9, 2.0, 3.0]))
        0.5
    """
    mu = as_array("mean", mean)
    sd = as_array("std", std)
    t = as_array("truth", truth)
    for name, arr in (("std", sd), ("truth", t)):
        try:
            ok = np.broadcast_shapes(arr.shape, mu.shape) == mu.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{name} must have mean's shape {mu.shape} or one that broadcasts to it, got {arr.shape}.")
    if mu.size == 0:
        raise ValueError("interval_coverage got empty arrays.")
    if (sd < 0).any():
        raise ValueError(f"std has {int((sd < 0).sum())} negative value(s).")
    level = as_real("level", level)
    if not (0 < level < 1):
        raise ValueError(f"level must be in (0, 1), got {level}.")
    q = NormalDist().inv_cdf(0.5 + level / 2)
    return float(np.mean(np.abs(t - mu) <= q * sd))


def completeness_gap(attributions, prediction, baseline_prediction) -> np.ndarray:
    r"""Signed completeness (efficiency) gap of additive attributions, per sample.

    .. math::

        \mathrm{gap}_i = \sum_{j=1}^D \phi_{ij} - \big(f(\mathbf x_i) - f(\mathbf b_i)\big).

    Integrated gradients and SHAP satisfy completeness (gap 0 up to quadrature / sampling error) for the
    prediction function and baseline they attribute; GPX contributions :math:`\mathbf w\odot\mathbf z` sum to
    the latent prediction, i.e. pass ``baseline_prediction=0``. The gap is in the units of :math:`f`; divide by
    :math:`|f(\mathbf x_i) - f(\mathbf b_i)|` yourself for a relative gap.

    :param attributions: ``(m, D)`` (or ``(D,)`` for one sample).
    :param prediction: ``(m,)`` (or a scalar), :math:`f(\mathbf x_i)`.
    :param baseline_prediction: a scalar or ``(m,)``, :math:`f(\mathbf b_i)`.
    :return: ``(m,)`` numpy array (``(1,)`` for one sample).

    Example:
        >>> import numpy as np
        >>> completeness_gap(np.array([[1.0, 2.0], [0.5, 0.5]]), np.array([3.5, 1.0]), 0.5)
        array([0. , 0.5])
    """
    a = np.atleast_2d(as_array("attributions", attributions, (1, 2)))
    m = a.shape[0]
    f = np.atleast_1d(as_array("prediction", prediction, (0, 1)))
    f0 = np.atleast_1d(as_array("baseline_prediction", baseline_prediction, (0, 1)))
    if f.shape != (m,):
        raise ValueError(f"prediction must have one value per sample ({m}), got shape {f.shape}.")
    if f0.shape not in ((1,), (m,)):
        raise ValueError(f"baseline_prediction must be a scalar or have shape ({m},), got {f0.shape}.")
    return a.sum(1) - (f - f0)
