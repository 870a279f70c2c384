"""Former home of :class:`~gpytorch_explain.VariationalGPXModel` and its objective, kept so that old imports work.

The model is in :mod:`gpytorch_explain.models.variational_gpx_model`, the objective in
:mod:`gpytorch_explain.mlls.gpx_variational_elbo`, the strategy in
:mod:`gpytorch_explain.variational.gpx_variational_strategy` and the fit in :mod:`gpytorch_explain.fit`.
"""

from ..mlls.gpx_variational_elbo import (  # noqa: F401
    GPXVariationalELBO,
    _gauss_hermite,
    _is_probit_bernoulli,
    _label_scheme,
    _nested_gauss_hermite,
    bernoulli_label_signs,
    gpx_expected_log_prob,
)
from ..variational.gpx_variational_strategy import GPXVariationalStrategy
from .variational_gpx_model import WEIGHT_NOISE_FLOOR, VariationalGPXModel

__all__ = [
    "WEIGHT_NOISE_FLOOR",
    "GPXVariationalELBO",
    "GPXVariationalStrategy",
    "VariationalGPXModel",
    "bernoulli_label_signs",
    "gpx_expected_log_prob",
]
