"""Model-agnostic local explanations: a GP surrogate sampled by Bayesian optimisation (BO-LIME, extended)."""

from .acquisition import ACQUISITIONS, GradientVarianceReduction
from .blackbox import BlackBox, from_sklearn_classifier, from_sklearn_regressor
from .explainer import LocalGPExplainer
from .result import LocalExplanation
from .surrogate import loo_predictions, loo_r2

__all__ = [
    "ACQUISITIONS",
    "BlackBox",
    "GradientVarianceReduction",
    "LocalExplanation",
    "LocalGPExplainer",
    "from_sklearn_classifier",
    "from_sklearn_regressor",
    "loo_predictions",
    "loo_r2",
]
