"""gpytorch-explain: Gaussian-process models that explain themselves, with calibrated uncertainty."""

from . import explainers, metrics, settings
from .attribution import (
    CompletenessGaps,
    GradientFunctional,
    IntegratedGradientFunctional,
    PosteriorGradient,
    PosteriorIntegratedGradients,
    global_importance,
)
from .errors import (
    AutogradFallbackWarning,
    ConvergenceError,
    KernelNotDifferentiableError,
    ModelStateError,
    QuadratureWarning,
)
from .explanation import GPXExplanation
from .fit import fit_gpx_model, fit_variational_gpx_model
from .kernels import GPXKernel, GradientKernel, IntegratedGradientKernel, PartitionedKernel
from .models import GPXModel, GPXPredictionStrategy, GPXVariationalELBO, GPXVariationalStrategy, VariationalGPXModel
from .operators import LowRankHadamardLinearOperator, PartitionedKernelLinearOperator, WeightPosteriorLinearOperator
from .utils import median_heuristic_lengthscale

__version__ = "0.1.0"

__all__ = [
    "CompletenessGaps",
    "GradientFunctional",
    "IntegratedGradientFunctional",
    "PosteriorGradient",
    "PosteriorIntegratedGradients",
    "GPXExplanation",
    "AutogradFallbackWarning",
    "ConvergenceError",
    "KernelNotDifferentiableError",
    "ModelStateError",
    "QuadratureWarning",
    "global_importance",
    "GPXKernel",
    "GradientKernel",
    "IntegratedGradientKernel",
    "PartitionedKernel",
    "PartitionedKernelLinearOperator",
    "LocalExplanation",
    "LocalGPExplainer",
    "GPXModel",
    "GPXPredictionStrategy",
    "GPXVariationalELBO",
    "GPXVariationalStrategy",
    "VariationalGPXModel",
    "LowRankHadamardLinearOperator",
    "WeightPosteriorLinearOperator",
    "median_heuristic_lengthscale",
    "fit_gpx_model",
    "fit_variational_gpx_model",
    "explainers",
    "metrics",
    "settings",
]

#: names served from subpackages that import BoTorch, loaded on first use (``import gpytorch_explain`` stays light)
_LAZY = {"LocalGPExplainer": "local", "LocalExplanation": "local", "local": None}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(".local", __name__)
        return module if _LAZY[name] is None else getattr(module, name)
    from ._deprecation import resolve_deprecated

    return resolve_deprecated(__name__, name, ("IntegratedGradients",), globals().__getitem__)
