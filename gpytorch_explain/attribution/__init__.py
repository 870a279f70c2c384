"""Attribution GPs: posterior gradients and integrated gradients of trained GPyTorch models."""

from ..errors import AutogradFallbackWarning, KernelNotDifferentiableError, QuadratureWarning
from .attribution_distribution import AttributionDistribution
from .classification import (
    ExpectedProbabilityAttribution,
    expected_probability_gradient,
    expected_probability_ig,
    latent_gradient_moments,
)
from .derived import DerivedCovariance, functional_mean
from .detection import fallback_reason
from .functionals import GradientFunctional, IntegratedGradientFunctional
from .global_importance import GlobalImportance, global_importance
from .lmc import LMCConditioning, lmc_joint_functional_posterior
from .plotting import plot_attribution_bars, plot_attribution_path
from .posterior import CompletenessGaps, PosteriorGradient, PosteriorIntegratedGradients
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
    "GradientFunctional",
    "IntegratedGradientFunctional",
    "PosteriorIntegratedGradients",
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

#: the derived kernels live in :mod:`gpytorch_explain.kernels`; served from there on first use, so that
#: ``gpytorch_explain.kernels`` (which imports this package's ``derived`` module) and this package form no circle
_KERNELS = ("DerivedKernel", "GradientKernel", "IntegratedGradientKernel")


def __getattr__(name: str):
    if name in _KERNELS:
        from .. import kernels

        return getattr(kernels, name)
    from .._deprecation import resolve_deprecated

    return resolve_deprecated(
        __name__, name, ("Gradient", "IntegratedGradient", "IntegratedGradients"), globals().__getitem__
    )
