#!/usr/bin/env python3
"""Explainers behind one interface: ``explain(x) -> ExplainerOutput(contributions (m, D), std, weights)``.

GP explainers of this package (:class:`GPXExplainer`, :class:`IGExplainer`, :class:`GradientInputExplainer`,
:class:`ARDExplainer`, :class:`KLExplainer`), global linear models (:class:`LinearExplainer`), the black-box
:class:`LocalGPExplainerAdapter` (BO-LIME, :class:`~gpytorch_explain.LocalGPExplainer` row by row) and, importing
their optional packages lazily, LIME, Kernel SHAP and Captum IG.
"""

from .agnostic import CaptumIGExplainer, KernelShapExplainer, LimeExplainer
from .base import Explainer, ExplainerOutput
from .gp import ARDExplainer, GPXExplainer, GradientInputExplainer, IGExplainer, KLExplainer
from .linear import LinearExplainer
from .local import LocalGPExplainerAdapter
from .plotting import plot_summary, plot_weight_maps

__all__ = [
    "ARDExplainer",
    "CaptumIGExplainer",
    "Explainer",
    "ExplainerOutput",
    "GPXExplainer",
    "GradientInputExplainer",
    "IGExplainer",
    "KLExplainer",
    "KernelShapExplainer",
    "LimeExplainer",
    "LinearExplainer",
    "LocalGPExplainerAdapter",
    "plot_summary",
    "plot_weight_maps",
]
