#!/usr/bin/env python3
r"""Lazy joint posterior covariance of an attribution GP (gradients or integrated gradients)."""

from __future__ import annotations

import torch
from linear_operator.operators import DenseLinearOperator, LinearOperator
from linear_operator.utils.memoize import cached
from torch import Tensor

from .block_posterior_linear_operator import BlockPosteriorLinearOperator

__all__ = ["AttributionPosteriorLinearOperator"]


class AttributionPosteriorLinearOperator(BlockPosteriorLinearOperator):
    r"""Posterior covariance of :math:`\mathcal L f` at :math:`m` points, :math:`D` features each, interleaved.

    .. math::

        \operatorname{Cov}[\mathcal L_i f(\mathbf x_p), \mathcal L_j f(\mathbf x_q) \mid \mathbf y]
        = k^{\mathcal L\mathcal L}_{ij}(\mathbf x_p, \mathbf x_q)
        - \mathbf b_{pi}^\top \mathbf C^{-1} \mathbf b_{qj},
        \qquad (\mathbf b_{pi})_j = k^{\mathcal L}_i(\mathbf x_p, \mathbf X_j),

    row ``p * D + i``. The derived prior :math:`k^{\mathcal L\mathcal L}` is evaluated only as needed: per-point
    :math:`D\times D` blocks for ``.variance`` and
    :meth:`~gpytorch_explain.operators.BlockPosteriorLinearOperator.point_blocks`, all pairs for :meth:`to_dense` and
    products.

    **Lazy rows.** With ``lazy_rows=True`` the second argument is the training inputs
    :math:`\mathbf X` (``(*batch, n, D)``) instead of the rows, and the rows :math:`\mathbf b` of a
    range of points are computed with ``derived.cross`` whenever they are needed, in the chunks of
    ``BlockPosteriorLinearOperator._chunks``. The point blocks, products and (for the
    ``"solve"`` factor) :meth:`to_dense` then never hold all :math:`m D n` of them at once, at the
    price of recomputing them (once for the point blocks, once per product). The values are those
    of the eager operator. Gradients reach the kernel hyperparameters through the point blocks and
    :meth:`to_dense` (computed under autograd), not through LinearOperator products, whose
    backward pass only sees the representation tensors (:math:`\mathbf x`, :math:`\mathbf X`, the
    factor).

    :param x: The points :math:`\mathbf x`, ``(*batch, m, D)``.
    :param rows: :math:`\mathbf b`, ``(*batch, m, D, n)`` (the derived cross-covariance), or the training
        inputs ``(*batch, n, D)`` with ``lazy_rows=True``.
    :param factor: Cholesky factor, LOVE root or the training covariance (see
        :class:`BlockPosteriorLinearOperator`).
    :param factor_type: ``"cholesky"``, ``"root"`` or ``"solve"``.
    :param derived: A :class:`~gpytorch_explain.attribution.DerivedCovariance` for the prior.
    :param middle: Optional symmetric middle matrix of the reduction (variational posteriors).
    :param lazy_rows: Compute the rows from ``derived.cross(x, X)`` chunk by chunk (see above).
    """

    def __init__(
        self,
        x: Tensor,
        rows: Tensor,
        factor,
        factor_type: str = "cholesky",
        derived=None,
        middle: Tensor | None = None,
        lazy_rows: bool = False,
    ):
        if derived is None:
            raise ValueError("derived (a DerivedCovariance) is required.")
        if lazy_rows:
            if rows.dim() < 2 or rows.size(-1) != x.size(-1):
                raise ValueError(f"training inputs {tuple(rows.shape)} do not match x {tuple(x.shape)}.")
        elif rows.shape[-3:-1] != x.shape[-2:]:
            raise ValueError(f"rows {tuple(rows.shape)} do not match x {tuple(x.shape)}.")
        super().__init__(
            x, rows, factor, factor_type=factor_type, derived=derived, middle=middle, lazy_rows=bool(lazy_rows)
        )
        self.x = x
        self.lazy_rows = bool(lazy_rows)
        self.rows = None if self.lazy_rows else rows
        self.train_inputs = rows if self.lazy_rows else None
        self.derived = derived
        self._init_factor(factor, factor_type, middle)

    @property
    def num_points(self) -> int:
        return self.x.size(-2)

    @property
    def num_features(self) -> int:
        return self.x.size(-1)

    @property
    def num_train(self) -> int:
        return self.train_inputs.size(-2) if self.lazy_rows else self.rows.size(-1)

    @property
    def dtype(self) -> torch.dtype:
        return self.train_inputs.dtype if self.lazy_rows else self.rows.dtype

    @property
    def device(self) -> torch.device:
        return self.train_inputs.device if self.lazy_rows else self.rows.device

    @cached(name="rows_batch_shape")
    def _rows_batch_shape(self) -> torch.Size:
        """Batch shape of the rows: that of ``derived.cross`` (points, training inputs and kernel broadcast), and
        with lazy rows also the factor's and the middle matrix's (an eager caller expands the rows itself)."""
        if not self.lazy_rows:
            return self.rows.shape[:-3]
        with torch.no_grad():
            probe = self.derived.cross(self.x[..., :1, :], self.train_inputs)
        shapes = [probe.shape[:-3], self.factor.shape[:-2]]
        if self.middle is not None:
            shapes.append(self.middle.shape[:-2])
        return torch.broadcast_shapes(*shapes)

    def _size(self) -> torch.Size:
        md = self.num_points * self.num_features
        batch = torch.broadcast_shapes(self._rows_batch_shape(), self.x.shape[:-2])
        return torch.Size((*batch, md, md))

    def _b_rows(self, points: slice) -> Tensor:
        if not self.lazy_rows:
            return self.rows[..., points, :, :]
        rows = self.derived.cross(self.x[..., points, :], self.train_inputs)
        return rows.expand(*self.batch_shape, *rows.shape[-3:])

    def _needs_grad(self) -> bool:
        if super()._needs_grad():
            return True
        if not (self.lazy_rows and torch.is_grad_enabled()):
            return False
        # lazily computed rows depend on the kernel's parameters (and IG baselines), not only on the representation
        baselines = getattr(self.derived.functional, "baselines", None)
        return any(p.requires_grad for p in self.derived.kernel.parameters()) or bool(
            baselines is not None and baselines.requires_grad
        )

    @cached(name="reduction_blocks")
    def _reduction_blocks(self) -> Tensor:
        r"""Per-point reduction blocks; a batched ``middle`` (``(*batch, r, r)``) is broadcast over the points.

        (The base class multiplies the ``(*batch, P, d, r)`` chunk by ``middle`` directly, which misaligns the batch
        dimensions whenever ``middle`` has one, e.g. independent multitask or batch SGPR/variational models.)
        """
        if self.middle is None or self.middle.dim() <= 2 or self.factor_type == "solve":
            return super()._reduction_blocks()
        middle = self.middle.unsqueeze(-3)
        d = self.num_features
        blocks = [torch.zeros(*self.batch_shape, 0, d, d, dtype=self.dtype, device=self.device)]
        buffer = self._buffer()
        for points in self._chunks():
            v = self._factor_times_b(points, buffer)  # (*batch, P, d, r)
            blocks.append((v @ middle) @ v.mT)
        return torch.cat(blocks, dim=-3)

    # ------------------------------------------------------------------ chunked products (lazy rows)
    def _bt_matmul(self, rhs: Tensor) -> Tensor:
        if not self.lazy_rows:
            return super()._bt_matmul(rhs)
        d = self.num_features
        out = None
        for points in self._chunks():
            rows = self._b_rows(points)
            rows = rows.reshape(*rows.shape[:-3], -1, rows.size(-1))
            part = rows.mT @ rhs[..., points.start * d : points.stop * d, :]
            out = part if out is None else out + part
        return out

    def _b_matmul(self, rhs: Tensor) -> Tensor:
        if not self.lazy_rows:
            return super()._b_matmul(rhs)
        parts = []
        for points in self._chunks():
            rows = self._b_rows(points)
            parts.append(rows.reshape(*rows.shape[:-3], -1, rows.size(-1)) @ rhs)
        return torch.cat(parts, dim=-2)

    @cached
    def to_dense(self) -> Tensor:
        if not (self.lazy_rows and self.factor_type == "solve") or self.num_points == 0:
            return super().to_dense()
        # C⁻¹ Bᵀ for one chunk of columns at a time; the rows of B are recomputed for each
        chunks = list(self._chunks())
        cols = []
        for col in chunks:
            rows_c = self._b_rows(col)
            sol = self._apply_inverse(rows_c.reshape(*rows_c.shape[:-3], -1, rows_c.size(-1)).mT)  # (n, |c|·d)
            del rows_c
            blocks = []
            for row in chunks:
                rows_r = self._b_rows(row)
                blocks.append(rows_r.reshape(*rows_r.shape[:-3], -1, rows_r.size(-1)) @ sol)
            cols.append(torch.cat(blocks, dim=-2))
        red = torch.cat(cols, dim=-1)
        return self._prior_dense() - 0.5 * (red + red.mT)

    @cached(name="prior_point_blocks")
    def _prior_point_blocks(self) -> Tensor:
        return self.derived.point(self.x)

    @cached(name="prior_dense")
    def _prior_dense(self) -> Tensor:
        joint = self.derived.joint(self.x, self.x)  # (*batch, m, D, m, D)
        md = self.num_points * self.num_features
        return joint.reshape(*joint.shape[:-4], md, md)

    # ------------------------------------------------------------------ batch operations
    # linear_operator's defaults rebuild the operator from its batch-indexed (permuted, unsqueezed) arguments, but the
    # prior k^LL and lazily computed rows come from ``derived``, whose kernel keeps its own batch shape: the rebuilt
    # operator would pair batch member b's rows with every member's prior. These operations act on the dense matrix.
    def _getitem(self, row_index, col_index, *batch_indices) -> LinearOperator:
        if all(isinstance(index, slice) and index == slice(None) for index in batch_indices):
            return super()._getitem(row_index, col_index, *batch_indices)
        return DenseLinearOperator(self.to_dense())._getitem(row_index, col_index, *batch_indices)

    def _permute_batch(self, *dims: int) -> LinearOperator:
        return DenseLinearOperator(self.to_dense())._permute_batch(*dims)

    def _unsqueeze_batch(self, dim: int) -> LinearOperator:
        return DenseLinearOperator(self.to_dense())._unsqueeze_batch(dim)

    def _transpose_nonbatch(self) -> LinearOperator:
        if self.middle is None:
            return self
        # symmetric by construction; the middle matrix is transposed so that gradients with respect to a
        # (numerically) non-symmetric middle tensor are those of the dense matrix
        return self.__class__(
            self.x,
            self.train_inputs if self.lazy_rows else self.rows,
            self.factor,
            factor_type=self.factor_type,
            derived=self.derived,
            middle=self.middle.mT,
            lazy_rows=self.lazy_rows,
        )
