#!/usr/bin/env python3
r"""Hadamard product of any LinearOperator with a rank-:math:`d` outer product."""

from __future__ import annotations

import torch
from linear_operator.operators import InterpolatedLinearOperator, LinearOperator, to_linear_operator
from linear_operator.utils.memoize import cached
from torch import Tensor

from ..settings import block_budget

__all__ = ["LowRankHadamardLinearOperator"]

_noop_index = slice(None, None, None)


def _is_noop(index) -> bool:
    return isinstance(index, slice) and index == _noop_index


class LowRankHadamardLinearOperator(LinearOperator):
    r"""The lazy matrix :math:`\mathbf K \odot \mathbf Z_1 \mathbf Z_2^\top`.

    :math:`\mathbf K` is any (batch of) :math:`M \times N` LinearOperator (dense, KISS-GP,
    inducing-point, KeOps, sums, ...), :math:`\mathbf Z_1` is :math:`M \times d` and
    :math:`\mathbf Z_2` is :math:`N \times d`. Writing :math:`\mathbf z_{1,l}` for the
    :math:`l`-th column of :math:`\mathbf Z_1`,

    .. math::

        \left(\mathbf K \odot \mathbf Z_1 \mathbf Z_2^\top\right) \mathbf V
        = \sum_{l=1}^{d} \mathbf z_{1,l} \odot \mathbf K \left(\mathbf z_{2,l} \odot \mathbf V\right),

    so a product with an :math:`N \times t` matrix costs one product of :math:`\mathbf K` with
    an :math:`N \times (d t)` matrix. The diagonal is
    :math:`\operatorname{diag}(\mathbf K) \odot \sum_l \mathbf z_{1,l} \odot \mathbf z_{2,l}`
    (:math:`O(Nd)` given the base diagonal), single entries cost one entry of :math:`\mathbf K`
    and a length-:math:`d` dot product, and no :math:`N \times N \times d` (or
    :math:`Nd \times Nd`) object is ever formed.

    This is the covariance of GPX (Yoshikawa & Iwata): with local weights
    :math:`\mathbf w_i = \mathbf g(\mathbf x_i)` whose :math:`d` coordinates are independent
    :math:`\mathcal{GP}(0, k)`, the function :math:`f_i = \mathbf w_i^\top \mathbf z_i` has
    covariance :math:`\mathbf K \odot \mathbf Z \mathbf Z^\top`.

    :param base_linear_op: :math:`\mathbf K`, shape ``(*batch, M, N)`` (a Tensor is wrapped).
    :param left_factor: :math:`\mathbf Z_1`, shape ``(*batch, M, d)``.
    :param right_factor: :math:`\mathbf Z_2`, shape ``(*batch, N, d)``; defaults to ``left_factor``.

    Example:
        >>> import torch
        >>> from linear_operator.operators import DenseLinearOperator
        >>> from gpytorch_explain import LowRankHadamardLinearOperator
        >>> K = DenseLinearOperator(torch.eye(4, dtype=torch.float64))
        >>> Z = torch.randn(4, 2, dtype=torch.float64)
        >>> op = LowRankHadamardLinearOperator(K, Z)
        >>> torch.allclose(op.to_dense(), torch.eye(4, dtype=torch.float64) * (Z @ Z.T))
        True
    """

    def _check_args(self, base_linear_op, left_factor, right_factor=None):
        if not isinstance(base_linear_op, LinearOperator):
            return f"base_linear_op must be a LinearOperator or Tensor, got {type(base_linear_op).__name__}."
        if not torch.is_tensor(left_factor) or (right_factor is not None and not torch.is_tensor(right_factor)):
            return "left_factor and right_factor must be Tensors."
        if right_factor is None:
            right_factor = left_factor
        if left_factor.dim() < 2 or right_factor.dim() < 2:
            shapes = f"{tuple(left_factor.shape)} and {tuple(right_factor.shape)}"
            return f"The factors must be at least 2-D (... x n x d); got shapes {shapes}."
        if left_factor.size(-1) != right_factor.size(-1):
            cols = f"{left_factor.size(-1)} and {right_factor.size(-1)}"
            return f"The factors must have the same number of columns d; got {cols}."
        if left_factor.size(-2) != base_linear_op.size(-2) or right_factor.size(-2) != base_linear_op.size(-1):
            rows = f"({left_factor.size(-2)}, {right_factor.size(-2)})"
            return f"Factor rows {rows} do not match the base operator's shape {tuple(base_linear_op.shape)}."

    def __init__(
        self, base_linear_op: LinearOperator | Tensor, left_factor: Tensor, right_factor: Tensor | None = None
    ):
        base_linear_op = to_linear_operator(base_linear_op)
        if right_factor is None:
            right_factor = left_factor
        batch_shape = torch.broadcast_shapes(
            base_linear_op.batch_shape, left_factor.shape[:-2], right_factor.shape[:-2]
        )
        if base_linear_op.batch_shape != batch_shape:
            base_linear_op = base_linear_op._expand_batch(batch_shape)
        if left_factor.shape[:-2] != batch_shape:
            left_factor = left_factor.expand(*batch_shape, *left_factor.shape[-2:])
        if right_factor.shape[:-2] != batch_shape:
            right_factor = right_factor.expand(*batch_shape, *right_factor.shape[-2:])
        super().__init__(base_linear_op, left_factor, right_factor)
        self.base_linear_op = base_linear_op
        self.left_factor = left_factor
        self.right_factor = right_factor

    # ------------------------------------------------------------------ shape
    def _size(self) -> torch.Size:
        return self.base_linear_op.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.left_factor.dtype

    @property
    def device(self) -> torch.device:
        return self.left_factor.device

    def _transpose_nonbatch(self) -> LinearOperator:
        return self.__class__(self.base_linear_op._transpose_nonbatch(), self.right_factor, self.left_factor)

    def _expand_batch(self, batch_shape: torch.Size | list[int]) -> LinearOperator:
        batch_shape = torch.Size(batch_shape)
        return self.__class__(
            self.base_linear_op._expand_batch(batch_shape),
            self.left_factor.expand(*batch_shape, *self.left_factor.shape[-2:]),
            self.right_factor.expand(*batch_shape, *self.right_factor.shape[-2:]),
        )

    def _unsqueeze_batch(self, dim: int) -> LinearOperator:
        return self.__class__(
            self.base_linear_op._unsqueeze_batch(dim),
            self.left_factor.unsqueeze(dim),
            self.right_factor.unsqueeze(dim),
        )

    def _permute_batch(self, *dims: int) -> LinearOperator:
        nb = len(dims)
        return self.__class__(
            self.base_linear_op._permute_batch(*dims),
            self.left_factor.permute(*dims, nb, nb + 1),
            self.right_factor.permute(*dims, nb, nb + 1),
        )

    def _evaluated_base(self) -> LinearOperator:
        """The base with any lazily evaluated kernel computed (cached by GPyTorch).

        Kept lazy at construction so that GPyTorch's train/test slicing evaluates only the
        blocks it needs; products and entry reads need the kernel's own operator.
        """
        base = self.base_linear_op
        if _is_lazy_kernel(base):
            base = base.evaluate_kernel()
        return base

    # --------------------------------------------------------------- indexing
    def _getitem(self, row_index, col_index, *batch_indices) -> LinearOperator:
        if _is_noop(row_index) and _is_noop(col_index) and not len(batch_indices):
            return self
        base = self.base_linear_op._getitem(row_index, col_index, *batch_indices)
        left = self.left_factor[(*batch_indices, row_index, _noop_index)]
        right = self.right_factor[(*batch_indices, col_index, _noop_index)]
        return self.__class__(base, left, right)

    def _get_indices(self, row_index, col_index, *batch_indices) -> Tensor:
        base_vals = self._evaluated_base()._get_indices(row_index, col_index, *batch_indices)
        left = self.left_factor[(*batch_indices, row_index)]
        right = self.right_factor[(*batch_indices, col_index)]
        return base_vals * (left * right).sum(-1)

    # ------------------------------------------------------------- arithmetic
    def _matmul(self, rhs: Tensor) -> Tensor:
        is_vector = rhs.dim() == 1
        if is_vector:
            rhs = rhs.unsqueeze(-1)
        d = self.right_factor.size(-1)
        num_cols = rhs.size(-1)
        # (..., N, d, t): column (l, j) is z_{2,l} * v_j
        scaled = self.right_factor.unsqueeze(-1) * rhs.unsqueeze(-2)
        scaled = scaled.reshape(*scaled.shape[:-2], d * num_cols)
        res = self._evaluated_base()._matmul(scaled)
        res = res.reshape(*res.shape[:-1], d, num_cols)
        res = (res * self.left_factor.unsqueeze(-1)).sum(-2)
        if is_vector:
            res = res.squeeze(-1)
        return res

    def _bilinear_derivative(self, left_vecs: Tensor, right_vecs: Tensor) -> tuple[Tensor | None, ...]:
        # d/dθ tr(Lᵀ (K ⊙ Z1 Z2ᵀ) R) with L' = [z1_l ⊙ L]_l and R' = [z2_l ⊙ R]_l is K's own
        # bilinear derivative with (L', R'); the factors' gradients come from K R' and Kᵀ L'.
        if left_vecs.dim() == 1:
            left_vecs = left_vecs.unsqueeze(-1)
            right_vecs = right_vecs.unsqueeze(-1)
        d = self.left_factor.size(-1)
        t = left_vecs.size(-1)
        left_exp = (self.left_factor.unsqueeze(-1) * left_vecs.unsqueeze(-2)).reshape(
            *torch.broadcast_shapes(self.left_factor.shape[:-2], left_vecs.shape[:-2]), left_vecs.size(-2), d * t
        )
        right_exp = (self.right_factor.unsqueeze(-1) * right_vecs.unsqueeze(-2)).reshape(
            *torch.broadcast_shapes(self.right_factor.shape[:-2], right_vecs.shape[:-2]), right_vecs.size(-2), d * t
        )
        base = self._evaluated_base()
        base_grads = tuple(base._bilinear_derivative(left_exp, right_exp))

        left_grad = right_grad = None
        if self.left_factor.requires_grad:
            k_right = base._matmul(right_exp).reshape(*left_exp.shape[:-1], d, t)
            left_grad = (k_right * left_vecs.unsqueeze(-2)).sum(-1)
            left_grad = _sum_to_shape(left_grad, self.left_factor.shape)
        if self.right_factor.requires_grad:
            kt_left = base._t_matmul(left_exp).reshape(*right_exp.shape[:-1], d, t)
            right_grad = (kt_left * right_vecs.unsqueeze(-2)).sum(-1)
            right_grad = _sum_to_shape(right_grad, self.right_factor.shape)
        return (*base_grads, left_grad, right_grad)

    def _diagonal(self) -> Tensor:
        return self.base_linear_op._diagonal() * (self.left_factor * self.right_factor).sum(-1)

    @cached
    def to_dense(self) -> Tensor:
        return _dense(self._evaluated_base()) * (self.left_factor @ self.right_factor.mT)

    def _mul_constant(self, other: Tensor | float) -> LinearOperator:
        return self.__class__(self.base_linear_op._mul_constant(other), self.left_factor, self.right_factor)


def _has_interpolation(op) -> bool:
    if isinstance(op, InterpolatedLinearOperator):
        return True
    return isinstance(op, LinearOperator) and any(_has_interpolation(arg) for arg in op._args)


def _dense(op: LinearOperator) -> Tensor:
    """``op.to_dense()``, through blocks of identity columns for operators with interpolation (KISS-GP)."""
    if not _has_interpolation(op):
        return op.to_dense()
    rows, cols = op.size(-2), op.size(-1)
    block = max(16, block_budget("dense_block") // max(rows, 1))
    if block >= cols:
        return op.to_dense()
    eye = torch.eye(cols, dtype=op.dtype, device=op.device)
    return torch.cat([op.matmul(eye[:, j : j + block]) for j in range(0, cols, block)], dim=-1)


def _is_lazy_kernel(op: LinearOperator) -> bool:
    try:
        from gpytorch.lazy import LazyEvaluatedKernelTensor
    except ImportError:  # pragma: no cover - gpytorch is a dependency
        return False
    return isinstance(op, LazyEvaluatedKernelTensor)


def _sum_to_shape(tensor: Tensor, shape: torch.Size) -> Tensor:
    """Sum broadcast batch dimensions of ``tensor`` down to ``shape``."""
    while tensor.dim() > len(shape):
        tensor = tensor.sum(0)
    for i, size in enumerate(shape):
        if size == 1 and tensor.size(i) != 1:
            tensor = tensor.sum(i, keepdim=True)
    return tensor
