#!/usr/bin/env python3
"""Adapter for fitted linear models (scikit-learn Ridge, Lasso, LinearRegression, ... or any ``coef_``)."""

from __future__ import annotations

import numpy as np

from .base import Explainer, ExplainerOutput, to_numpy

__all__ = ["LinearExplainer"]


class LinearExplainer(Explainer):
    r"""A global linear model :math:`f(\mathbf x) = \mathbf w^\top\mathbf x + c`: contributions
    :math:`w_j (x_j - \bar x_j)`, weights :math:`\mathbf w` for every sample.

    The contributions are taken relative to ``mean`` (the training mean; default 0, which is the training
    mean for standardised inputs), so they add up to :math:`f(\mathbf x) - f(\bar{\mathbf x})`, the same
    convention as SHAP for a linear model. The weights are global, so the stability score is 0.

    :param model: anything with a ``coef_`` of length ``D`` (a fitted scikit-learn linear model).
    :param mean: ``(D,)`` reference point, or ``None`` for 0.
    :param name: label in tables.

    Example:
        >>> import numpy as np
        >>> from sklearn.linear_model import Ridge
        >>> x = np.random.default_rng(0).normal(size=(20, 2))
        >>> out = LinearExplainer(Ridge(1.0).fit(x, x @ [1.0, -2.0])).explain(x[:2])
        >>> np.allclose(out.contributions, out.weights * x[:2])
        True
    """

    def __init__(self, model, mean=None, name: str | None = None):
        coef = np.asarray(model.coef_, dtype=np.float64).reshape(-1)
        self.model = model
        self.coef = coef
        self.mean = np.zeros_like(coef) if mean is None else to_numpy(mean).reshape(-1)
        if self.mean.shape != coef.shape:
            raise ValueError(f"mean must have shape {coef.shape}, got {self.mean.shape}.")
        self.name = name or type(model).__name__

    def explain(self, x) -> ExplainerOutput:
        xa = to_numpy(x)
        if xa.ndim != 2 or xa.shape[1] != self.coef.size:
            raise ValueError(f"x must be (m, {self.coef.size}), got shape {xa.shape}.")
        w = np.broadcast_to(self.coef, xa.shape).copy()
        return ExplainerOutput(w * (xa - self.mean), None, w)
