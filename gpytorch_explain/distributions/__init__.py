"""Distributions of GPX models (see :class:`GPXMultivariateNormal`)."""

from .gpx_multivariate_normal import GPXMultivariateNormal

__all__ = ["GPXMultivariateNormal"]
