#!/usr/bin/env python3
r"""A weight-posterior covariance rescaled per feature: :math:`(\mathbf I_m\otimes\mathbf S)\,\boldsymbol\Sigma\,
(\mathbf I_m\otimes\mathbf S)`."""

from __future__ import annotations

import torch
from linear_operator.operators import LinearOperator
from torch import Tensor

__all__ = ["FeatureScaledLinearOperator"]


class FeatureScaledLinearOperator(LinearOperator):
    r"""Covariance of :math:`\mathbf c \odot \mathbf w_p` (each point :math:`p`) from the covariance of
    :math:`\mathbf w_p`, interleaved (index ``point * d + feature``).

    With :math:`\mathbf S = \operatorname{diag}(\mathbf c)`, the result is
    :math:`(\mathbf I_m \otimes \mathbf S)\boldsymbol\Sigma(\mathbf I_m \otimes \mathbf S)`; per-point blocks are
    :math:`\mathbf S\boldsymbol\Sigma_p\mathbf S`. :class:`~gpytorch_explain.GPXModel` uses it to report the
    weights of the raw features when the kernel works with rescaled ones (``standardize_x``/``standardize_y``).

    :param base: :math:`\boldsymbol\Sigma`, ``(*batch, m d, m d)``; its ``point_blocks()`` is used when present.
    :param scale: :math:`\mathbf c`, ``(d,)`` or ``(*batch, d)``; it is stored expanded to the batch shape of
        ``base``, so that batch indexing, permutation and expansion act on both alike.

    Example:
        >>> import torch
        >>> from linear_operator.operators import DenseLinearOperator
        >>> a = torch.randn(4, 4, dtype=torch.float64)
        >>> sigma = a @ a.T
        >>> c = torch.tensor([2.0, 3.0], dtype=torch.float64)
        >>> op = FeatureScaledLinearOperator(DenseLinearOperator(sigma), c)
        >>> s = torch.diag(c.repeat(2))
        >>> torch.allclose(op.to_dense(), s @ sigma @ s)
        True
    """

    def __init__(self, base: LinearOperator, scale: Tensor):
        d = scale.size(-1) if scale.dim() else 0
        if d == 0 or base.size(-1) % d != 0:
            raise ValueError(f"Covariance of size {base.size(-1)} is not a multiple of d = {d}.")
        batch_shape = torch.broadcast_shapes(base.batch_shape, scale.shape[:-1])
        if base.batch_shape != batch_shape:
            base = base.expand(*batch_shape, *base.matrix_shape)
        if scale.shape[:-1] != batch_shape:
            scale = scale.expand(*batch_shape, d)
        super().__init__(base, scale)
        self.base = base
        self.scale = scale

    @property
    def num_features(self) -> int:
        return self.scale.size(-1)

    def _full_scale(self) -> Tensor:
        r""":math:`\mathbf 1_m \otimes \mathbf c`, ``(*batch, m d)``."""
        m = self.base.size(-1) // self.num_features
        return self.scale.repeat(*[1] * (self.scale.dim() - 1), m)

    def _size(self) -> torch.Size:
        return self.base.shape

    def _transpose_nonbatch(self) -> LinearOperator:
        return self.__class__(self.base._transpose_nonbatch(), self.scale)

    def _matmul(self, rhs: Tensor) -> Tensor:
        s = self._full_scale()
        if rhs.dim() == 1:
            return s * self.base._matmul((s * rhs).unsqueeze(-1)).squeeze(-1)
        return s.unsqueeze(-1) * self.base._matmul(s.unsqueeze(-1) * rhs)

    def _t_matmul(self, rhs: Tensor) -> Tensor:
        s = self._full_scale()
        if rhs.dim() == 1:
            return s * self.base._t_matmul((s * rhs).unsqueeze(-1)).squeeze(-1)
        return s.unsqueeze(-1) * self.base._t_matmul(s.unsqueeze(-1) * rhs)

    def _diagonal(self) -> Tensor:
        return self.base._diagonal() * self._full_scale().pow(2)

    def _expand_batch(self, batch_shape: torch.Size) -> LinearOperator:
        return self.__class__(self.base._expand_batch(batch_shape), self.scale)

    def point_blocks(self) -> Tensor:
        r"""Per-point :math:`d\times d` blocks :math:`\mathbf S\boldsymbol\Sigma_p\mathbf S`, ``(*batch, m, d, d)``."""
        if hasattr(self.base, "point_blocks"):
            blocks = self.base.point_blocks()
        else:
            d = self.num_features
            dense = self.base.to_dense()
            m = dense.size(-1) // d
            blocks = dense.reshape(*dense.shape[:-2], m, d, m, d)
            blocks = torch.diagonal(blocks, dim1=-4, dim2=-2).movedim(-1, -3)
        c = self.scale.unsqueeze(-2)  # (*batch, 1, d): broadcast over the points
        return c.unsqueeze(-1) * blocks * c.unsqueeze(-2)

    def to_dense(self) -> Tensor:
        s = self._full_scale()
        return s.unsqueeze(-1) * self.base.to_dense() * s.unsqueeze(-2)
