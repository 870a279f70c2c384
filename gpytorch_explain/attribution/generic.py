#!/usr/bin/env python3
r"""Derivative and integrated-gradient covariances of any twice-differentiable GPyTorch kernel (one import path).

This module gathers the public functions of the two modules that implement them, so that
``from gpytorch_explain.attribution import generic`` and ``generic.ig_cross(...)`` keep working:

* :mod:`gpytorch_explain.attribution.kernel_derivatives` — :func:`kernel_derivatives`, :func:`grad_cross`,
  :func:`grad_joint`, :func:`grad_point` (closed-form and autograd leaves);
* :mod:`gpytorch_explain.attribution.path_integrals` — :func:`ig_cross`, :func:`ig_joint`, :func:`ig_point`
  (the integrated-gradient rules with their kink / Duffy handling).

The mathematics is stated in those modules.
"""

from ..errors import KernelNotDifferentiableError
from ._quadrature import gauss_legendre as _gl  # noqa: F401 (the private rule's name before the split)
from .kernel_derivatives import DEFAULT_BLOCK, grad_cross, grad_joint, grad_point, kernel_derivatives
from .path_integrals import DEFAULT_KINK_TOL, DEFAULT_ORDER_1D, DEFAULT_ORDER_2D, ig_cross, ig_joint, ig_point

__all__ = [
    "DEFAULT_BLOCK",
    "DEFAULT_KINK_TOL",
    "DEFAULT_ORDER_1D",
    "DEFAULT_ORDER_2D",
    "KernelNotDifferentiableError",
    "grad_cross",
    "grad_joint",
    "grad_point",
    "ig_cross",
    "ig_joint",
    "ig_point",
    "kernel_derivatives",
]
