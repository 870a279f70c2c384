#!/usr/bin/env python3
"""Argument checks of :class:`~gpytorch_explain.local.LocalGPExplainer`: a clear ``TypeError`` / ``ValueError``
naming the argument, never a silent cast (a bool is not a count, a NaN is not a tolerance)."""

from __future__ import annotations

import numbers

import numpy as np

__all__: list[str] = []


def _as_int(name: str, value) -> int:
    """``value`` if it is a Python int or a numpy integer (not a bool), as an int; else a ``TypeError``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer (int or numpy integer), got {value!r} ({type(value).__name__}).")
    return int(value)


def _as_real(name: str, value, *, positive: bool = False, lower: float | None = None) -> float:
    """``value`` as a finite float (a real, not a bool; ``> 0`` with ``positive``, ``>= lower``), else an error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    if not np.isfinite(value) or (positive and value <= 0) or (lower is not None and value < lower):
        need = "a positive number" if positive else (f"a number >= {lower:g}" if lower is not None else "finite")
        raise ValueError(f"{name} must be {need}, got {value}.")
    return value


def _as_count(name: str, value, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum`` (see :func:`_as_int`)."""
    value = _as_int(name, value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return value


def _as_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__}).")
    return bool(value)
