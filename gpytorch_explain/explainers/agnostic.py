#!/usr/bin/env python3
"""Adapters for model-agnostic explainers from optional packages (LIME, SHAP, Captum), imported lazily.

These packages are benchmark extras, not dependencies of ``gpytorch_explain``; each adapter imports its
package on construction and raises an ``ImportError`` naming the package if it is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np
import torch

from .base import Explainer, ExplainerOutput, safe_ratio, to_numpy

__all__ = ["CaptumIGExplainer", "KernelShapExplainer", "LimeExplainer"]


def _require(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"{extra} needs the optional package '{module.split('.')[0]}' (pip install it).") from exc


class LimeExplainer(Explainer):
    r"""LIME (Ribeiro et al. 2016, ``lime.lime_tabular``) on a prediction function, continuous features
    (``discretize_continuous=False``): LIME fits a weighted ridge model on standardised perturbations
    :math:`(x_j - \mu_j)/s_j` (:math:`\mu, s` from ``train_x``). Weights are its coefficients divided by
    :math:`s_j`; contributions are coefficient × standardised value, :math:`w_j (x_j - \mu_j)`.

    :param predict_fn: numpy ``(n, D)`` -> ``(n,)``.
    :param train_x: numpy ``(n, D)`` training inputs (for LIME's sampling statistics).
    :param num_samples: perturbations per explained sample (LIME's default 5000).
    :param seed: ``random_state`` for LIME, reset before each explained row: a row's explanation depends on the seed
        and the row only (not on the rows explained before it, in this call or earlier ones). ``None``: random.
    """

    name = "LIME"

    def __init__(self, predict_fn: Callable, train_x, num_samples: int = 5000, seed: int | None = 0, **kwargs):
        lime_tabular = _require("lime.lime_tabular", "LimeExplainer")
        self.train_x = to_numpy(train_x)
        self.predict_fn = predict_fn
        self.num_samples = num_samples
        self.seed = seed
        self.lime = lime_tabular.LimeTabularExplainer(
            self.train_x, mode="regression", discretize_continuous=False, random_state=seed, **kwargs
        )

    def explain(self, x) -> ExplainerOutput:
        xa = to_numpy(x)
        if xa.ndim != 2 or xa.shape[1] != self.train_x.shape[1]:
            raise ValueError(
                f"LimeExplainer.explain takes rows of shape (m, {self.train_x.shape[1]}), got {tuple(xa.shape)}; "
                "pass one sample as x[None, :]."
            )
        D = xa.shape[1]
        coef = np.zeros_like(xa)
        for i, row in enumerate(xa):
            if self.seed is not None:  # LIME draws its perturbations from this generator
                self.lime.random_state = np.random.RandomState(self.seed)
                self.lime.base.random_state = self.lime.random_state
            exp = self.lime.explain_instance(row, self.predict_fn, num_features=D, num_samples=self.num_samples)
            for j, c in exp.local_exp[1]:  # regression: key 1 is the model (key 0 is its negation)
                coef[i, j] = c
        scale = self.lime.scaler.scale_
        mean = self.lime.scaler.mean_
        return ExplainerOutput(coef * (xa - mean) / scale, None, coef / scale)


class KernelShapExplainer(Explainer):
    r"""Kernel SHAP (Lundberg & Lee 2017, ``shap.KernelExplainer``) on a prediction function with a background
    set (e.g. ``shap.kmeans(train_x, 10)`` or a subsample). Contributions are the SHAP values (they add up to
    :math:`f(\mathbf x) - \mathbb E_{\text{background}}[f]`); weights are SHAP value / :math:`(x_j - \bar b_j)`
    (0 where :math:`x_j = \bar b_j`), with :math:`\bar b` the background mean.

    :param predict_fn: numpy ``(n, D)`` -> ``(n,)``; :param background: numpy ``(k, D)``;
    :param nsamples: coalitions per sample (``"auto"`` = ``2 D + 2048``).
    """

    name = "SHAP"

    def __init__(self, predict_fn: Callable, background, nsamples: int | str = "auto", seed: int | None = 0):
        shap = _require("shap", "KernelShapExplainer")
        self.background = to_numpy(background)
        self.explainer = shap.KernelExplainer(predict_fn, self.background)
        self.nsamples = nsamples
        self.seed = seed

    def explain(self, x) -> ExplainerOutput:
        xa = to_numpy(x)
        if self.seed is not None:
            np.random.seed(self.seed)  # KernelExplainer samples coalitions with numpy's global generator
        values = np.asarray(self.explainer.shap_values(xa, nsamples=self.nsamples, silent=True), dtype=np.float64)
        values = values.reshape(xa.shape)
        return ExplainerOutput(values, None, safe_ratio(values, xa - self.background.mean(0)))


class CaptumIGExplainer(Explainer):
    r"""Captum's integrated gradients (Riemann/Gauss–Legendre sums) of a differentiable torch function,
    e.g. a GP's posterior mean ``lambda t: model(t).mean``. Weights are IG / :math:`(x_j - b_j)`.

    :param forward_fn: torch ``(n, D)`` -> ``(n,)``.
    :param baseline: ``(D,)`` tensor or array (default 0).
    :param n_steps: As in ``captum.attr.IntegratedGradients.attribute``.
    :param method: As in ``captum.attr.IntegratedGradients.attribute``.
    """

    name = "Captum IG"

    def __init__(self, forward_fn: Callable, baseline=None, n_steps: int = 50, method: str = "gausslegendre"):
        attr = _require("captum.attr", "CaptumIGExplainer")
        self.ig = attr.IntegratedGradients(forward_fn)
        self.baseline = baseline
        self.n_steps = n_steps
        self.method = method

    def explain(self, x) -> ExplainerOutput:
        xt = x if torch.is_tensor(x) else torch.as_tensor(x, dtype=torch.float64)
        if self.baseline is None:
            base = torch.zeros_like(xt)
        else:
            base = torch.as_tensor(self.baseline, dtype=xt.dtype, device=xt.device).expand_as(xt)
        attr = self.ig.attribute(xt, baselines=base, n_steps=self.n_steps, method=self.method)
        a = to_numpy(attr)
        return ExplainerOutput(a, None, safe_ratio(a, to_numpy(xt - base)))
