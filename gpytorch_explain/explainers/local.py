#!/usr/bin/env python3
"""Adapter: :class:`~gpytorch_explain.LocalGPExplainer` (BO-LIME and beyond) behind the common explainer interface."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .base import Explainer, ExplainerOutput, safe_ratio, to_numpy

__all__ = ["LocalGPExplainerAdapter"]

#: what the adapter reports as contributions (see :class:`LocalGPExplainerAdapter`)
SCORES = ("integrated_gradients", "gradient_input", "relevance")


class LocalGPExplainerAdapter(Explainer):
    r"""A black box explained row by row by :class:`~gpytorch_explain.LocalGPExplainer`, as an :class:`Explainer`.

    Each of the ``m`` rows gets its own explanation (``budget`` black-box calls each, the same ``seed`` for
    every row); the full :class:`~gpytorch_explain.local.LocalExplanation` objects of the last call are kept in
    ``results``. With :math:`\mathbf b` the local baseline (``baseline``, default: the training mean clipped to
    the sampling box; ``LocalExplanation.baseline``), ``score`` picks the contributions:

    * ``"integrated_gradients"`` (default, additive): the surrogate's integrated gradients from
      :math:`\mathbf b` with their posterior std (they add up to the surrogate's
      :math:`f(\mathbf x) - f(\mathbf b)`); weights :math:`\mathrm{IG}_j / (x_j - b_j)`, the path-averaged
      gradient (0 where :math:`x_j = b_j`);
    * ``"gradient_input"``: :math:`\mathbb E[\partial f/\partial x_j]\,(x_j - b_j)` with std
      :math:`\operatorname{std}(\partial f/\partial x_j)\,|x_j - b_j|`; weights the gradient (not additive);
    * ``"relevance"``: the ARD relevance :math:`1/\ell_j` (sums to 1) as weights and
      :math:`1/\ell_j\,(x_j - b_j)` as contributions, as :class:`ARDExplainer` does (not additive; no std).

    :param predict_fn: the black box, ``(n, D)`` -> ``n`` numbers (see :class:`~gpytorch_explain.LocalGPExplainer`).
    :param training_data: ``(N, D)`` data (feature scales, categorical values, the default baseline).
    :param score: one of ``"integrated_gradients"``, ``"gradient_input"``, ``"relevance"``.
    :param baseline: ``(D,)`` baseline for every row (default: per row, the training mean clipped to its box).
    :param kwargs: passed to :class:`~gpytorch_explain.LocalGPExplainer` (``acquisition``, ``budget``, ``seed``, ...).

    Example:
        >>> import numpy as np
        >>> from gpytorch_explain.explainers import LocalGPExplainerAdapter
        >>> data = np.random.RandomState(0).randn(200, 3)
        >>> f = lambda X: 2.0 * X[:, 0] - X[:, 1]
        >>> adapter = LocalGPExplainerAdapter(f, data, budget=12, seed=0, raw_samples=16)
        >>> out = adapter.explain(data[:2])
        >>> out.contributions.shape, out.std.shape, len(adapter.results)
        ((2, 3), (2, 3), 2)
    """

    name = "LocalGP"

    def __init__(
        self,
        predict_fn: Callable,
        training_data,
        *,
        score: str = "integrated_gradients",
        baseline=None,
        **kwargs,
    ):
        from ..local import LocalGPExplainer

        if score not in SCORES:
            raise ValueError(f"Unknown score {score!r}; choose one of {SCORES}.")
        self.score = score
        self.additive = score == "integrated_gradients"
        self.explainer = LocalGPExplainer(predict_fn, training_data, **kwargs)
        self.baseline = None if baseline is None else self.explainer._check_x(to_numpy(baseline))
        self.results: list = []

    def explain(self, x) -> ExplainerOutput:
        xa = to_numpy(x)
        D = self.explainer.num_features
        if xa.ndim == 1:
            xa = xa[None, :]
        if xa.ndim != 2 or xa.shape[1] != D:
            raise ValueError(f"x must be (m, {D}) (or one row of {D}), got shape {xa.shape}.")
        self.results = [self.explainer.explain(row, baseline=self.baseline) for row in xa]
        diff = np.stack([r.x - r.baseline for r in self.results])
        if self.score == "integrated_gradients":
            ig = np.stack([r.integrated_gradients for r in self.results])
            std = np.stack([r.integrated_gradients_std for r in self.results])
            return ExplainerOutput(ig, std, safe_ratio(ig, diff))
        if self.score == "gradient_input":
            g = np.stack([r.gradient_mean for r in self.results])
            s = np.stack([r.gradient_std for r in self.results])
            return ExplainerOutput(g * diff, s * np.abs(diff), g)
        rel = np.stack([r.relevance for r in self.results])
        return ExplainerOutput(rel * diff, None, rel)
