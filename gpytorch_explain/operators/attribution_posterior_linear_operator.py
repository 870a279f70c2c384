#!/usr/bin/env python3
r"""Lazy joint posterior covariance of an attribution GP (gradients or integrated gradients)."""

from __future__ import annotations

import torch
from linear_operator.operators import LinearOperator
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

    row ``p * D + i``. The derived prior :math:`k^{\mathcal L\mathcal L}` is evaluated only as
    needed: per-point :math:`D\times D` blocks for ``.variance`` and :meth:`point_blocks`, all
    pairs for :meth:`to_dense` and products.

    :param x: The points :math:`\mathbf x`, ``(*batch, m, D)``.
    :param rows: :math:`\mathbf b`, ``(*batch, m, D, n)`` (the derived cross-covariance).
    :param factor: Cholesky factor, LOVE root or the training covariance (see
        :class:`BlockPosteriorLinearOperator`).
    :param factor_type: ``"cholesky"``, ``"root"`` or ``"solve"``.
    :param derived: A :class:`~gpytorch_explain.attribution.DerivedCovariance` for the prior.
    :param middle: Optional symmetric middle matrix of the reduction (variational posteriors).
    """

    def __init__(
        self, x: Tensor, rows: Tensor, factor, factor_type: str = "cholesky", derived=None, middle: Tensor | None = None
    ):
        if derived is None:
            raise ValueError("derived (a DerivedCovariance) is required.")
        if rows.shape[-3:-1] != x.shape[-2:]:
            raise ValueError(f"rows {tuple(rows.shape)} do not match x {tuple(x.shape)}.")
        super().__init__(x, rows, factor, factor_type=factor_type, derived=derived, middle=middle)
        self.x = x
        self.rows = rows
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
        return self.rows.size(-1)

    @property
    def dtype(self) -> torch.dtype:
        return self.rows.dtype

    @property
    def device(self) -> torch.device:
        return self.rows.device

    def _size(self) -> torch.Size:
        md = self.num_points * self.num_features
        batch = torch.broadcast_shapes(self.rows.shape[:-3], self.x.shape[:-2])
        return torch.Size((*batch, md, md))

    def _b_rows(self, points: slice) -> Tensor:
        return self.rows[..., points, :, :]

    @cached(name="prior_point_blocks")
    def _prior_point_blocks(self) -> Tensor:
        return self.derived.point(self.x)

    @cached(name="prior_dense")
    def _prior_dense(self) -> Tensor:
        joint = self.derived.joint(self.x, self.x)  # (*batch, m, D, m, D)
        md = self.num_points * self.num_features
        return joint.reshape(*joint.shape[:-4], md, md)

    def _transpose_nonbatch(self) -> LinearOperator:
        return self
