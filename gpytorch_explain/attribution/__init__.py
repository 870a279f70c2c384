"""Attribution GPs: posterior gradients and integrated gradients of trained GPyTorch models."""

from .classification import (
    ExpectedProbabilityAttribution,
    expected_probability_gradient,
    expected_probability_ig,
    latent_gradient_moments,
)
from .derived import DerivedCovariance, functional_mean
from .functionals import Gradient, IntegratedGradient
from .kernels import DerivedKernel, GradientKernel, IntegratedGradientKernel
from .plotting import plot_attribution_bars, plot_attribution_path
from .posterior import AttributionDistribution, CompletenessGaps, IntegratedGradients, PosteriorGradient
from .sgpr import sgpr_functional_posterior
from .variational import variational_functional_posterior

__all__ = [
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
    "plot_attribution_bars",
    "plot_attribution_path",
    "sgpr_functional_posterior",
    "variational_functional_posterior",
]
