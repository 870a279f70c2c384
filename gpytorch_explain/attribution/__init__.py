"""Attribution GPs: posterior gradients and integrated gradients of trained GPyTorch models.

Module map (public entry points first; ``_``-prefixed modules are private helpers):

* ``posterior`` — :class:`PosteriorGradient`, :class:`PosteriorIntegratedGradients`; their shared machinery is in
  ``functional_posterior``; results are :class:`AttributionDistribution` (``attribution_distribution``) and
  :class:`CompletenessGaps` (``completeness_gaps``);
* ``functionals`` — :class:`GradientFunctional`, :class:`IntegratedGradientFunctional`;
* ``derived`` — :class:`DerivedCovariance`, the derived covariances dispatched to ``rbf`` (closed-form RBF, with
  ``_rbf_moments``) or to ``kernel_derivatives`` (any kernel: closed-form and autograd leaves in
  ``_derivative_leaves``) and ``path_integrals`` (IG rules with the kink / Duffy handling of ``_kinks``,
  ``_path_pairs`` and the polygon geometry of ``_polygon``); ``generic`` is the one import path of those public
  functions; ``_quadrature`` holds the Gauss–Legendre rules and the chunking helpers;
* ``sgpr``, ``variational``, ``lmc`` — SGPR, variational and LMC conditioning; ``fallback`` and ``detection`` — the
  exact autograd fallback and when it is used; ``adaptive`` — adaptive quadrature order; ``caches`` — prediction
  caches;
* ``classification`` (with ``latent_gradient_moments`` and ``_probability_links``), ``probability_intervals`` —
  class-probability attributions; ``global_importance``, ``kl_relevance``, ``plotting``.

The derived kernels (:class:`~gpytorch_explain.kernels.GradientKernel`, ...) live in :mod:`gpytorch_explain.kernels`
and are served here too.
"""

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
from .latent_gradient_moments import LatentGradientMoments
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
    "LatentGradientMoments",
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
