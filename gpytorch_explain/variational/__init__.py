"""Variational strategies of GPX models."""

from .gpx_variational_strategy import GPXVariationalStrategy

__all__ = ["GPXVariationalStrategy"]
