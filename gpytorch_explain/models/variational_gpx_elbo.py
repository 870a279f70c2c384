"""Former home of the variational GPX objective, kept so that old imports work; it now lives in
:mod:`gpytorch_explain.mlls.gpx_variational_elbo`."""

from ..mlls.gpx_variational_elbo import (  # noqa: F401
    GPXVariationalELBO,
    _is_probit_bernoulli,
    _label_scheme,
    _nested_gauss_hermite,
    bernoulli_label_signs,
    gpx_expected_log_prob,
)

__all__ = ["GPXVariationalELBO", "bernoulli_label_signs", "gpx_expected_log_prob"]
