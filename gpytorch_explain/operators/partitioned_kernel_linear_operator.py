#!/usr/bin/env python3
r"""A kernel matrix whose products and backward pass run in row blocks, never stored whole."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from linear_operator import to_dense
from linear_operator.operators import KernelLinearOperator, LinearOperator
from linear_operator.utils.memoize import cached
from torch import Tensor

from .._compat import Matmul
from ..settings import max_block_elements

__all__ = ["PartitionedKernelLinearOperator", "max_block_elements", "block_rows"]


def block_rows(num_cols: int, batch_numel: int = 1) -> int:
    """Rows per block so that a block of ``num_cols`` columns (times the batch size) fits
    :class:`~gpytorch_explain.settings.max_block_elements` (at least one row)."""
    return max(1, max_block_elements.value() // max(1, num_cols * batch_numel))


class PartitionedKernelLinearOperator(KernelLinearOperator):
    r"""The kernel matrix :math:`\mathbf K_{ij} = k_{\boldsymbol\theta}(\mathbf x^{(1)}_i, \mathbf x^{(2)}_j)`,
    evaluated block by block.

    A ``KernelLinearOperator`` (same constructor: ``x1``, ``x2``, ``covar_func`` and the hyperparameters as
    keyword arguments, so that linear_operator's autograd routes gradients to them) whose products
    never hold :math:`\mathbf K`. With row blocks :math:`\mathcal B_1, \dots, \mathcal B_p` of ``b`` rows
    (``block_rows``, set by :class:`~gpytorch_explain.settings.max_block_elements`),

    .. math::

        (\mathbf K\mathbf V)_{\mathcal B_r} = \mathbf K_{\mathcal B_r,:}\mathbf V, \qquad
        \frac{\partial\,\operatorname{tr}(\mathbf U^\top\mathbf K\mathbf V)}{\partial\boldsymbol\theta}
        = \sum_r \frac{\partial\,\operatorname{tr}(\mathbf U_{\mathcal B_r}^\top\mathbf K_{\mathcal B_r,:}
        \mathbf V)}{\partial\boldsymbol\theta},

    where each block :math:`\mathbf K_{\mathcal B_r,:}` is built by ``covar_func`` when it is needed and,
    in the backward pass, differentiated by autograd and freed before the next one. The same holds for
    the inputs :math:`\mathbf x^{(1)}, \mathbf x^{(2)}`. Memory: :math:`O(N(t + b))` for :math:`t`
    right-hand sides, time :math:`O(N^2 t)` as for the dense product (the kernel entries are recomputed
    in the backward pass). The diagonal and single entries (``_get_indices``, used by the pivoted-Cholesky
    preconditioner) cost :math:`O(N)`; ``to_dense`` still gives the whole matrix.

    ``covar_func(x1, x2, **params)`` must return the (dense or lazy) block for any rows ``x1``; if it has a
    ``diag(x1, x2, **params)`` method, that gives the diagonal. Multi-output covariance functions
    (``num_outputs_per_input`` other than ``(1, 1)``) are not supported.

    Example:
        >>> import torch
        >>> from gpytorch_explain.operators import PartitionedKernelLinearOperator
        >>> from gpytorch_explain.operators.partitioned_kernel_linear_operator import max_block_elements
        >>> def rbf(x1, x2, lengthscale):
        ...     return torch.exp(-0.5 * torch.cdist(x1 / lengthscale, x2 / lengthscale).pow(2))
        >>> x = torch.randn(50, 2, dtype=torch.float64)
        >>> ls = torch.tensor([[0.7, 1.3]], dtype=torch.float64)
        >>> K = PartitionedKernelLinearOperator(x, x, covar_func=rbf, lengthscale=ls)
        >>> v = torch.randn(50, 3, dtype=torch.float64)
        >>> with max_block_elements(200):  # blocks of 4 rows
        ...     torch.allclose(K @ v, rbf(x, x, ls) @ v)
        True
    """

    def __init__(
        self,
        x1: Tensor,
        x2: Tensor,
        covar_func: Callable[..., Tensor | LinearOperator],
        num_outputs_per_input: tuple[int, int] = (1, 1),
        num_nonbatch_dimensions: dict[str, int] | None = None,
        **params: Tensor | Any,
    ):
        if tuple(num_outputs_per_input) != (1, 1):
            raise NotImplementedError(
                "PartitionedKernelLinearOperator supports one output per input; got num_outputs_per_input="
                f"{tuple(num_outputs_per_input)} (multitask / derivative kernels)."
            )
        if not (torch.is_tensor(x1) and torch.is_tensor(x2)) or x1.dim() < 2 or x2.dim() < 2:
            raise ValueError("x1 and x2 must be Tensors of shape (..., n, D).")
        if x1.size(-1) != x2.size(-1):
            raise ValueError(f"x1 and x2 must have the same number of columns; got {x1.size(-1)} and {x2.size(-1)}.")
        super().__init__(
            x1,
            x2,
            covar_func=covar_func,
            num_outputs_per_input=num_outputs_per_input,
            num_nonbatch_dimensions=num_nonbatch_dimensions,
            **params,
        )

    # ------------------------------------------------------------------ blocks
    def _block(self, x1: Tensor, x2: Tensor, params: dict[str, Tensor]) -> Tensor:
        return to_dense(self.covar_func(x1, x2, **params, **self.nontensor_params))

    def _row_blocks(self) -> list[tuple[int, int]]:
        rows, cols = self.x1.size(-2), self.x2.size(-2)
        step = block_rows(cols, math.prod(self.batch_broadcast_shape))
        return [(i, min(i + step, rows)) for i in range(0, rows, step)]

    @property
    def dtype(self) -> torch.dtype:
        return self.x1.dtype

    @property
    def device(self) -> torch.device:
        return self.x1.device

    # -------------------------------------------------------------- arithmetic
    def _matmul(self, rhs: Tensor) -> Tensor:
        if torch.is_grad_enabled() and (rhs.requires_grad or any(a.requires_grad for a in self.representation())):
            # called directly under autograd: go through linear_operator's Function, whose backward is
            # the blocked _bilinear_derivative (a graph over all blocks would hold K)
            return Matmul.apply(self.representation_tree(), rhs, *self.representation())
        is_vector = rhs.dim() == 1
        if is_vector:
            rhs = rhs.unsqueeze(-1)
        rhs = rhs.contiguous()
        parts = [self._block(self.x1[..., i:j, :], self.x2, self.tensor_params) @ rhs for i, j in self._row_blocks()]
        res = torch.cat(parts, dim=-2)
        return res.squeeze(-1) if is_vector else res

    def _bilinear_derivative(self, left_vecs: Tensor, right_vecs: Tensor) -> tuple[Tensor | None, ...]:
        if left_vecs.dim() == 1:
            left_vecs = left_vecs.unsqueeze(-1)
            right_vecs = right_vecs.unsqueeze(-1)
        # detached leaves, one per representation entry (x1 and x2 are often one tensor)
        args = [
            a.detach().requires_grad_(True) if (a.dtype.is_floating_point and a.requires_grad) else a.detach()
            for a in self.representation()
        ]
        wanted = [a for a in args if a.requires_grad]
        if not wanted:
            return (None,) * len(args)
        grads: list[Tensor | None] = [None] * len(wanted)
        with torch.autograd.enable_grad():
            op = self.representation_tree()(*args)
            right = right_vecs.contiguous()
            for i, j in op._row_blocks():
                block = op._block(op.x1[..., i:j, :], op.x2, op.tensor_params)
                loss = (left_vecs[..., i:j, :] * (block @ right)).sum()
                parts = torch.autograd.grad(loss, wanted, allow_unused=True)
                grads = [g if p is None else (p if g is None else g + p) for g, p in zip(grads, parts, strict=True)]
        it = iter(grads)
        return tuple(next(it) if a.requires_grad else None for a in args)

    @cached(name="kernel_diag")
    def _diagonal(self) -> Tensor:
        diag_fn = getattr(self.covar_func, "diag", None)
        if diag_fn is None:
            return super()._diagonal()
        res = to_dense(diag_fn(self.x1, self.x2, **self.tensor_params, **self.nontensor_params))
        return res.expand(*self.batch_shape, self.size(-1))

    @cached
    def to_dense(self) -> Tensor:
        return self._block(self.x1, self.x2, self.tensor_params).expand(self.shape).contiguous()
