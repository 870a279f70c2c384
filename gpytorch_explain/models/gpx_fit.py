"""Former home of the GPX fit, kept so that old imports work; it now lives in :mod:`gpytorch_explain.fit`
(:func:`~gpytorch_explain.fit_gpx_model`)."""

from ..fit import fit_gpx_model as fit_gpx

__all__ = ["fit_gpx"]
