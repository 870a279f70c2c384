"""Model-agnostic local explanations: a GP surrogate sampled by Bayesian optimisation (BO-LIME, extended).

This subpackage is built on BoTorch. It imports BoTorch through ``gpytorch_explain._compat.import_botorch()``
first, so that GPyTorch's global defaults stay as they were (``import botorch`` alone changes them).
"""

from .._compat import import_botorch

import_botorch()

from .acquisition import ACQUISITIONS, GradientVarianceReduction  # noqa: E402 (after the settings-preserving BoTorch import)
from .blackbox import BlackBox, from_sklearn_classifier, from_sklearn_regressor  # noqa: E402 (after the settings-preserving BoTorch import)
from .explainer import LocalGPExplainer  # noqa: E402 (after the settings-preserving BoTorch import)
from .presets import PRESETS  # noqa: E402 (after the settings-preserving BoTorch import)
from .result import LocalExplanation  # noqa: E402 (after the settings-preserving BoTorch import)
from .surrogate import loo_predictions, loo_r2  # noqa: E402 (after the settings-preserving BoTorch import)
from .tabular import FrameCodec  # noqa: E402 (after the settings-preserving BoTorch import)

__all__ = [
    "ACQUISITIONS",
    "BlackBox",
    "FrameCodec",
    "GradientVarianceReduction",
    "LocalExplanation",
    "LocalGPExplainer",
    "PRESETS",
    "from_sklearn_classifier",
    "from_sklearn_regressor",
    "loo_predictions",
    "loo_r2",
]
