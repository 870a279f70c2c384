"""Former home of the variational GPX strategy, kept so that old imports work; it now lives in
:mod:`gpytorch_explain.variational.gpx_variational_strategy`."""

from ..variational.gpx_variational_strategy import GPXVariationalStrategy

__all__ = ["GPXVariationalStrategy"]
