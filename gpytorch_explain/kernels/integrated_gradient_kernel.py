#!/usr/bin/env python3
r"""The covariance kernel of the integrated-gradient attributions of a GP."""

from __future__ import annotations

from gpytorch.kernels import Kernel
from torch import Tensor

from ..attribution.derived import DEFAULT_ORDER
from ..attribution.functionals import IntegratedGradientFunctional
from .derived_kernel import DerivedKernel

__all__ = ["IntegratedGradientKernel"]


class IntegratedGradientKernel(DerivedKernel):
    r"""Covariance of integrated-gradient attributions with baselines ``(k, D)`` (or ``(D,)``)."""

    def __init__(self, base_kernel: Kernel, baselines: Tensor, order: int = DEFAULT_ORDER, **kwargs):
        super().__init__(base_kernel, IntegratedGradientFunctional(baselines), order=order, **kwargs)
