#!/usr/bin/env python3
r"""The covariance kernel of the gradient of a GP."""

from __future__ import annotations

from gpytorch.kernels import Kernel

from ..attribution.derived import DEFAULT_ORDER
from ..attribution.functionals import GradientFunctional
from .derived_kernel import DerivedKernel

__all__ = ["GradientKernel"]


class GradientKernel(DerivedKernel):
    r"""Covariance of the gradient: :math:`\partial_i \partial'_j k(\mathbf x, \mathbf x')`."""

    def __init__(self, base_kernel: Kernel, order: int = DEFAULT_ORDER, **kwargs):
        super().__init__(base_kernel, GradientFunctional(), order=order, **kwargs)
