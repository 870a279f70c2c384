"""gpytorch-explain: Gaussian-process models that explain themselves, with calibrated uncertainty."""

from . import explainers, metrics, settings
from .attribution import CompletenessGaps, IntegratedGradients, PosteriorGradient
from .errors import ConvergenceError, ModelStateError
from .explanation import GPXExplanation
from .kernels import GPXKernel
from .models import GPXModel, GPXPredictionStrategy, GPXVariationalELBO, GPXVariationalStrategy, VariationalGPXModel
from .operators import LowRankHadamardLinearOperator, WeightPosteriorLinearOperator
from .utils import median_heuristic_lengthscale

__version__ = "0.1.0"

__all__ = [
    "CompletenessGaps",
    "IntegratedGradients",
    "PosteriorGradient",
    "GPXExplanation",
    "ConvergenceError",
    "ModelStateError",
    "GPXKernel",
    "GPXModel",
    "GPXPredictionStrategy",
    "GPXVariationalELBO",
    "GPXVariationalStrategy",
    "VariationalGPXModel",
    "LowRankHadamardLinearOperator",
    "WeightPosteriorLinearOperator",
    "median_heuristic_lengthscale",
    "explainers",
    "metrics",
    "settings",
]
