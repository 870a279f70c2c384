"""gpytorch-explain: Gaussian-process models that explain themselves, with calibrated uncertainty."""

from . import settings
from .attribution import CompletenessGaps, IntegratedGradients, PosteriorGradient, global_importance
from .errors import (
    AutogradFallbackWarning,
    ConvergenceError,
    KernelNotDifferentiableError,
    ModelStateError,
    QuadratureWarning,
)
from .explanation import GPXExplanation
from .kernels import GPXKernel, PartitionedKernel
from .models import GPXModel, GPXPredictionStrategy, GPXVariationalELBO, GPXVariationalStrategy, VariationalGPXModel
from .operators import LowRankHadamardLinearOperator, PartitionedKernelLinearOperator, WeightPosteriorLinearOperator
from .utils import median_heuristic_lengthscale

__version__ = "0.1.0"

__all__ = [
    "CompletenessGaps",
    "IntegratedGradients",
    "PosteriorGradient",
    "GPXExplanation",
    "AutogradFallbackWarning",
    "ConvergenceError",
    "KernelNotDifferentiableError",
    "ModelStateError",
    "QuadratureWarning",
    "global_importance",
    "GPXKernel",
    "PartitionedKernel",
    "PartitionedKernelLinearOperator",
    "GPXModel",
    "GPXPredictionStrategy",
    "GPXVariationalELBO",
    "GPXVariationalStrategy",
    "VariationalGPXModel",
    "LowRankHadamardLinearOperator",
    "WeightPosteriorLinearOperator",
    "median_heuristic_lengthscale",
    "settings",
]
