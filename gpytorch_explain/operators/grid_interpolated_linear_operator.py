#!/usr/bin/env python3
r"""KISS-GP interpolation as sparse products, and the interpolated grid operator GPX uses for wide grid roots.

GPyTorch's KISS-GP covariance is :math:`\mathbf K_{\mathrm{SKI}} = \mathbf W_1\mathbf K_{UU}\mathbf W_2^\top` with
sparse interpolation weights :math:`\mathbf W` (``k`` nonzeros per row: indices and values ``(n, k)``) and a
Kronecker grid Gram :math:`\mathbf K_{UU}`. This module holds

* :func:`_interp_times`, :math:`\boldsymbol\Phi = \mathbf W\mathbf S` for a root :math:`\mathbf S` (``G x r``)
  with the gradient :math:`\partial\mathbf S = \mathbf W^\top\partial\boldsymbol\Phi` (one CSR product each way;
  used by :func:`gpytorch_explain.kernels.grid_features`);
* :class:`_GridInterpolatedLinearOperator`, linear_operator's ``InterpolatedLinearOperator`` with fast CSR
  products, row reads through unit-vector products, and a per-dimension factorised diagonal
  :math:`\mathbf w_i^\top(\otimes_j\mathbf K^{(j)})\mathbf w_i = \prod_j\mathbf w_i^{(j)\top}\mathbf K^{(j)}
  \mathbf w_i^{(j)}` (built by :func:`gpytorch_explain.kernels.grid_operator`).

Both are private: the public entry points are in :mod:`gpytorch_explain.kernels.ski_features`.

Example:
    >>> import torch
    >>> from linear_operator.operators import DenseLinearOperator
    >>> idx = torch.tensor([[0, 1], [1, 2], [2, 3]])
    >>> val = torch.tensor([[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]], dtype=torch.float64)
    >>> gram = torch.eye(4, dtype=torch.float64) + 0.1
    >>> W = torch.zeros(3, 4, dtype=torch.float64).scatter_add(1, idx, val)
    >>> op = _GridInterpolatedLinearOperator(DenseLinearOperator(gram), idx, val, idx, val)
    >>> torch.allclose(op.to_dense(), W @ gram @ W.T)
    True
    >>> torch.allclose(_interp_times(idx, val, gram), W @ gram)
    True
"""

from __future__ import annotations

import warnings

import torch
from linear_operator.operators import ConstantMulLinearOperator, InterpolatedLinearOperator, LinearOperator
from linear_operator.utils import sparse
from linear_operator.utils.memoize import cached
from torch import Tensor

from ..settings import block_budget

__all__: list[str] = []


def _blocks(rows: int, width: int):
    step = max(1, block_budget("feature_block") // max(width, 1))
    return [slice(i, min(i + step, rows)) for i in range(0, rows, step)]


def _interp_matrix(indices: Tensor, values: Tensor, columns: int) -> Tensor:
    """The sparse interpolation matrix ``W`` (``n x G``, CSR) from indices/values ``(n, k)``."""
    n, k = indices.shape
    crow = torch.arange(0, n * k + 1, k, device=indices.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(
            crow, indices.reshape(-1), values.reshape(-1), size=(n, columns), check_invariants=False
        )


def _interp_matrix_t(indices: Tensor, values: Tensor, columns: int) -> Tensor:
    """``W^T`` (``G x n``, CSR)."""
    n, k = indices.shape
    rows = torch.arange(n, device=indices.device).repeat_interleave(k)
    coo = torch.sparse_coo_tensor(
        torch.stack([indices.reshape(-1), rows]), values.reshape(-1), (columns, n), check_invariants=False
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return coo.to_sparse_csr()


class _InterpTimes(torch.autograd.Function):
    r""":math:`\boldsymbol\Phi = \mathbf W\mathbf S` from interpolation indices/values (``n x k``) and a root ``S``
    (``G x r``): one sparse (CSR) product each way, :math:`\partial\mathbf S = \mathbf W^\top\partial\boldsymbol\Phi`.
    Nothing of size :math:`nkr` is formed (autograd through :math:`k` gathers would keep :math:`k` copies of
    :math:`\boldsymbol\Phi`); the gradient of the interpolation values, when they need one, goes in row blocks.
    """

    @staticmethod
    def forward(ctx, indices: Tensor, values: Tensor, root: Tensor) -> Tensor:
        ctx.save_for_backward(indices, values, root)
        return _interp_matrix(indices, values, root.size(0)) @ root

    @staticmethod
    def backward(ctx, grad: Tensor):
        indices, values, root = ctx.saved_tensors
        grad_values = grad_root = None
        if ctx.needs_input_grad[2]:
            grad_root = _interp_matrix_t(indices, values, root.size(0)) @ grad
        if ctx.needs_input_grad[1]:
            grad_values = torch.empty_like(values)
            for sl in _blocks(indices.size(0), root.size(-1)):
                ind, g = indices[sl], grad[sl]
                for j in range(ind.size(-1)):
                    grad_values[sl, j] = (g * root[ind[:, j]]).sum(-1)
        return None, grad_values, grad_root


def _interp_times(indices: Tensor, values: Tensor, root: Tensor) -> Tensor:
    r""":math:`\mathbf W\mathbf S` from the interpolation indices/values (``n x k``) and the root (``G x r``)."""
    return _InterpTimes.apply(indices, values, root)


#: ``_get_indices`` reads up to this many distinct rows through products with unit vectors.
ROW_READ_LIMIT = 64


class _GridInterpolatedLinearOperator(InterpolatedLinearOperator):
    r"""``InterpolatedLinearOperator`` over a Kronecker grid Gram, with fast paths for CG at :math:`10^5` rows:

    * products through CSR interpolation matrices built once per operator, and a backward that touches only the
      grid Gram unless the interpolation values need gradients (linear_operator expands products and gradients
      by the interpolation width, :math:`4^D`);
    * entries in a few rows (or columns) come from one product with unit vectors,
      :math:`\mathbf K^\top\mathbf e_i`, instead of :math:`k^2` grid entries per matrix entry (:math:`4^{2D}`
      for a :math:`D`-dimensional grid);
    * with the per-dimension interpolation (``diag_indices``/``diag_values``, ``(D, n, 4)`` in the Kronecker
      factors' order) the diagonal factorises over dimensions,
      :math:`\mathbf w_i^\top(\otimes_j\mathbf K^{(j)})\mathbf w_i = \prod_j \mathbf w^{(j)\top}_i
      \mathbf K^{(j)}\mathbf w^{(j)}_i`: :math:`O(nD\,4^2)` instead of :math:`O(n\,4^{2D})`.

    The per-dimension interpolation tensors are keyword tensors, so linear_operator's reconstructions keep them;
    slices drop them.
    """

    def __init__(
        self,
        base_linear_op,
        left_interp_indices,
        left_interp_values,
        right_interp_indices,
        right_interp_values,
        diag_indices: Tensor | None = None,
        diag_values: Tensor | None = None,
    ):
        super().__init__(
            base_linear_op, left_interp_indices, left_interp_values, right_interp_indices, right_interp_values
        )
        if diag_indices is not None:
            self._differentiable_kwargs["diag_indices"] = diag_indices
            self._differentiable_kwargs["diag_values"] = diag_values
        self.diag_indices, self.diag_values = diag_indices, diag_values

    def _getitem(self, row_index, col_index, *batch_indices) -> LinearOperator:
        plain = InterpolatedLinearOperator(
            self.base_linear_op,
            self.left_interp_indices,
            self.left_interp_values,
            self.right_interp_indices,
            self.right_interp_values,
        )
        res = plain._getitem(row_index, col_index, *batch_indices)
        if isinstance(res, InterpolatedLinearOperator):
            return _GridInterpolatedLinearOperator(
                res.base_linear_op,
                res.left_interp_indices,
                res.left_interp_values,
                res.right_interp_indices,
                res.right_interp_values,
            )
        return res

    @cached(name="left_interp_csr")
    def _left_csr(self) -> Tensor:
        return _interp_matrix(self.left_interp_indices, self.left_interp_values, self.base_linear_op.size(-2))

    @cached(name="right_interp_csr_t")
    def _right_csr_t(self) -> Tensor:
        return _interp_matrix_t(self.right_interp_indices, self.right_interp_values, self.base_linear_op.size(-1))

    def _matmul(self, rhs: Tensor) -> Tensor:
        r""":math:`\mathbf W_1(\mathbf K_{UU}(\mathbf W_2^\top\mathbf v))` with the interpolation as CSR matrices
        built once per operator (linear_operator rebuilds COO matrices on every product)."""
        if self.batch_shape or rhs.dim() > 2 or rhs.requires_grad or self.left_interp_values.requires_grad:
            return super()._matmul(rhs)
        squeeze = rhs.dim() == 1
        rhs = rhs.unsqueeze(-1) if squeeze else rhs
        on_grid = self.base_linear_op._matmul(self._right_csr_t() @ rhs)
        res = self._left_csr() @ on_grid
        return res.squeeze(-1) if squeeze else res

    def matmul(self, other):
        """linear_operator's generic product (``_matmul`` forward, ``_bilinear_derivative`` backward) instead of
        ``InterpolatedLinearOperator.matmul``, which expands the right-hand side by the interpolation width (``64 n``
        rows for a 3-D grid): densifying an ``m x n`` cross-covariance that way took 10 GiB at ``n = 10^4``."""
        if torch.is_tensor(other) and not self.batch_shape and other.dim() <= 2:
            return LinearOperator.matmul(self, other)
        return super().matmul(other)

    def _bilinear_derivative(self, left_vecs: Tensor, right_vecs: Tensor) -> tuple:
        """Gradients for the grid Gram only, unless the interpolation values need one (inputs with gradients):
        linear_operator's version always forms the values' gradients through ``(n, k, t)`` intermediates."""
        if self.left_interp_values.requires_grad or self.right_interp_values.requires_grad:
            res = tuple(super()._bilinear_derivative(left_vecs, right_vecs))
        else:
            if left_vecs.dim() == 1:
                left_vecs, right_vecs = left_vecs.unsqueeze(-1), right_vecs.unsqueeze(-1)
            left_t = self._sparse_left_interp_t(self.left_interp_indices, self.left_interp_values)
            right_t = self._sparse_right_interp_t(self.right_interp_indices, self.right_interp_values)
            left_res = sparse.bdsmm(left_t, left_vecs)
            right_res = sparse.bdsmm(right_t, right_vecs)
            res = tuple(self.base_linear_op._bilinear_derivative(left_res, right_res)) + (None,) * 4
        return res + (None, None) if self.diag_indices is not None else res

    def _get_indices(self, row_index, col_index, *batch_indices) -> Tensor:
        if batch_indices or self.batch_shape or not (torch.is_tensor(row_index) and torch.is_tensor(col_index)):
            return super()._get_indices(row_index, col_index, *batch_indices)
        rows, row_inverse = torch.unique(row_index, return_inverse=True)
        if rows.numel() <= ROW_READ_LIMIT:  # column j of K^T e_{rows[j]} holds row rows[j]
            block = self._columns(rows, self.left_interp_indices, self.left_interp_values, transpose=True)
            return block[col_index, row_inverse]
        cols, col_inverse = torch.unique(col_index, return_inverse=True)
        if cols.numel() <= ROW_READ_LIMIT:
            block = self._columns(cols, self.right_interp_indices, self.right_interp_values, transpose=False)
            return block[row_index, col_inverse]
        return super()._get_indices(row_index, col_index, *batch_indices)

    def _columns(self, which: Tensor, indices: Tensor, values: Tensor, transpose: bool) -> Tensor:
        r""":math:`\mathbf K\mathbf e_j` (or :math:`\mathbf K^\top\mathbf e_j`) for the indices ``which``: the
        interpolation rows of ``which`` scattered onto the grid, one grid-Gram product, and the other side's
        interpolation with a memory-light backward (no :math:`n \times G` gradient when linear_operator's
        pivoted-Cholesky backward asks for the interpolation values' gradients)."""
        k = indices.size(-1)
        grid = torch.zeros(self.base_linear_op.size(-1), which.numel(), dtype=self.dtype, device=self.device)
        column = torch.arange(which.numel(), device=self.device).repeat_interleave(k)
        grid = grid.index_put((indices[which].reshape(-1), column), values[which].reshape(-1), accumulate=True)
        if transpose:
            on_grid = self.base_linear_op._t_matmul(grid)
            return _interp_times(self.right_interp_indices, self.right_interp_values, on_grid)
        on_grid = self.base_linear_op._matmul(grid)
        return _interp_times(self.left_interp_indices, self.left_interp_values, on_grid)

    def _diagonal(self) -> Tensor:
        if self.diag_indices is None:
            return super()._diagonal()
        base, scale = self.base_linear_op, None
        if isinstance(base, ConstantMulLinearOperator):
            base, scale = base.base_linear_op, base.expanded_constant
        res = None
        for op, idx, val in zip(base.linear_ops, self.diag_indices.unbind(0), self.diag_values.unbind(0), strict=True):
            f = op.to_dense()
            part = (f[idx.unsqueeze(-1), idx.unsqueeze(-2)] * val.unsqueeze(-1) * val.unsqueeze(-2)).sum((-2, -1))
            res = part if res is None else res * part
        return res if scale is None else res * scale.reshape(())
