"""Attribution GPs: posterior gradients and integrated gradients of trained GPyTorch models."""

from ..errors import AutogradFallbackWarning, KernelNotDifferentiableError, QuadratureWarning
from .classification import (
    ExpectedProbabilityAttribution,
    expected_probability_gradient,
    expected_probability_ig,
    latent_gradient_moments,
)
from .derived import DerivedCovariance, functional_mean
from .detection import fallback_reason
from .functionals import Gradient, IntegratedGradient
from .global_importance import GlobalImportance, global_importance
from .kernels import DerivedKernel, GradientKernel, IntegratedGradientKernel
from .lmc import LMCConditioning, lmc_joint_functional_posterior
from .plotting import plot_attribution_bars, plot_attribution_path
from .posterior import AttributionDistribution, CompletenessGaps, IntegratedGradients, PosteriorGradient
from .probability_intervals import (
    ProbabilityAttributionDistribution,
    probability_gradient_distribution,
    probability_ig_distribution,
)
from .sgpr import sgpr_functional_posterior
from .variational import variational_functional_posterior

__all__ = [
    "AutogradFallbackWarning",
    "KernelNotDifferentiableError",
    "QuadratureWarning",
    "fallback_reason",
    "AttributionDistribution",
    "CompletenessGaps",
    "DerivedCovariance",
    "ExpectedProbabilityAttribution",
    "expected_probability_gradient",
    "expected_probability_ig",
    "latent_gradient_moments",
    "DerivedKernel",
    "GradientKernel",
    "IntegratedGradientKernel",
    "Gradient",
    "IntegratedGradient",
    "IntegratedGradients",
    "PosteriorGradient",
    "functional_mean",
    "GlobalImportance",
    "global_importance",
    "LMCConditioning",
    "lmc_joint_functional_posterior",
    "ProbabilityAttributionDistribution",
    "probability_gradient_distribution",
    "probability_ig_distribution",
    "plot_attribution_bars",
    "plot_attribution_path",
    "sgpr_functional_posterior",
    "variational_functional_posterior",
]
