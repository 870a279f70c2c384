#!/usr/bin/env python3
r"""Derived kernels as GPyTorch ``Kernel`` objects: the covariance of a linear functional of a GP."""

from __future__ import annotations

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from ..attribution.derived import DEFAULT_ORDER, DerivedCovariance

__all__ = ["DerivedKernel"]


class DerivedKernel(Kernel):
    r"""The covariance of :math:`\mathcal L f` for :math:`f \sim \mathcal{GP}(0, k)`, as a multi-output kernel.

    :math:`\mathcal L` maps :math:`f` to :math:`D` outputs per input (gradient components or
    integrated-gradient attributions); evaluated on ``x1`` (``(*batch, m, D)``) and ``x2``
    (``(*batch, m', D)``) this kernel is the ``(m·D) x (m'·D)`` matrix

    .. math:: \left[\operatorname{Cov}(\mathcal L_i f(\mathbf x_p), \mathcal L_j f(\mathbf x'_q))\right]_{(p,i),(q,j)},

    interleaved (row ``p * D + i``), like GPyTorch's multitask kernels.
    :meth:`cross_covariance` gives :math:`\operatorname{Cov}(\mathcal L_i f(\mathbf x_p), f(\mathbf x'_q))`.
    The base kernel's hyperparameters are shared (it is a submodule).

    :param base_kernel: :math:`k`.
    :param functional: :class:`~gpytorch_explain.attribution.GradientFunctional` or
        :class:`~gpytorch_explain.attribution.IntegratedGradientFunctional`.
    :param order: Gauss–Legendre order for kernels without closed forms.

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain.kernels import GradientKernel
        >>> k = GradientKernel(gpytorch.kernels.RBFKernel())
        >>> x = torch.randn(4, 3, dtype=torch.float64)
        >>> k(x).to_dense().shape  # 4 points x 3 gradient components
        torch.Size([12, 12])
    """

    is_stationary = False

    def __init__(self, base_kernel: Kernel, functional, order: int = DEFAULT_ORDER, **kwargs):
        super().__init__(batch_shape=base_kernel.batch_shape, **kwargs)
        self.base_kernel = base_kernel
        self.functional = functional
        self.order = int(order)

    @property
    def batch_shape(self) -> torch.Size:
        """The base kernel's batch shape. A derived kernel has no hyperparameters of its own, and ``kernel[i]`` /
        ``expand_batch`` (which update a kernel's batch shape from its own parameters only) act on the base kernel."""
        base = self._modules.get("base_kernel")
        return self._batch_shape if base is None else base.batch_shape

    @batch_shape.setter
    def batch_shape(self, value: torch.Size) -> None:
        self._batch_shape = torch.Size(value)

    def _derived(self) -> DerivedCovariance:
        return DerivedCovariance(self.base_kernel, self.functional, order=self.order)

    def num_outputs_per_input(self, x1: Tensor, x2: Tensor) -> int:
        return x1.size(-1)

    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, last_dim_is_batch: bool = False, **params) -> Tensor:
        if last_dim_is_batch:
            raise NotImplementedError("DerivedKernel does not support last_dim_is_batch.")
        derived = self._derived()
        if diag:
            if x1.shape != x2.shape or not torch.equal(x1, x2):
                joint = derived.joint(x1, x2)
                m, D = x1.shape[-2:]
                return joint.reshape(*joint.shape[:-4], m * D, m * D).diagonal(dim1=-2, dim2=-1)
            return derived.point(x1).diagonal(dim1=-2, dim2=-1).reshape(*x1.shape[:-2], -1)
        joint = derived.joint(x1, x2)
        m1, D = x1.shape[-2:]
        m2 = x2.size(-2)
        return joint.reshape(*joint.shape[:-4], m1 * D, m2 * D)

    def cross_covariance(self, x: Tensor, X: Tensor) -> Tensor:
        r""":math:`\operatorname{Cov}(\mathcal L_i f(\mathbf x_p), f(\mathbf X_j))` as an ``(m·D) x n`` matrix."""
        cross = self._derived().cross(x, X)
        return cross.reshape(*cross.shape[:-3], -1, cross.size(-1))
