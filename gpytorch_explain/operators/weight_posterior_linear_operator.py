#!/usr/bin/env python3
r"""Lazy joint posterior covariance of GPX local weights."""

from __future__ import annotations

import torch
from linear_operator.operators import LinearOperator, to_linear_operator
from linear_operator.utils.memoize import cached
from torch import Tensor

from ..settings import block_budget
from ..utils.linalg import kron_identity
from .block_posterior_linear_operator import BlockPosteriorLinearOperator

__all__ = ["WeightPosteriorLinearOperator"]


class WeightPosteriorLinearOperator(BlockPosteriorLinearOperator):
    r"""Joint posterior covariance of the local weights :math:`\mathbf w_*` at :math:`m` points.

    With :math:`d` explanation features, points are interleaved with features (row
    ``p * d + l`` is feature :math:`l` of point :math:`p`) and

    .. math::

        \operatorname{Cov}[\mathbf w_*] = (\mathbf K_{**} + \sigma_w^2 \mathbf I_m) \otimes \mathbf I_d
        - \mathbf B^\top \mathbf C^{-1} \mathbf B,
        \qquad
        \mathbf B_{i,(p,l)} = k(\mathbf x_p^*, \mathbf x_i)\, z_{il},

    where :math:`\mathbf C = \sigma_y^2 \mathbf I + (\mathbf K + \sigma_w^2 \mathbf I) \odot \mathbf Z\mathbf Z^\top`
    is the training covariance. :math:`\mathbf C^{-1}` enters through a factor: either its
    Cholesky factor :math:`\mathbf L` (exact; :math:`\mathbf C^{-1} = \mathbf L^{-\top}\mathbf L^{-1}`)
    or a root :math:`\mathbf R` with :math:`\mathbf C^{-1} \approx \mathbf R \mathbf R^\top`
    (a LOVE-style cache of rank :math:`r`).

    Nothing of size :math:`md \times md` is formed unless
    :meth:`~gpytorch_explain.operators.BlockPosteriorLinearOperator.to_dense` is called. A product with an
    :math:`md \times t` matrix costs :math:`O(mndt)` plus one solve; the per-point :math:`d \times d` blocks
    (:meth:`~gpytorch_explain.operators.BlockPosteriorLinearOperator.point_blocks`) and hence the diagonal cost
    :math:`O(m n^2 d)` with a Cholesky factor and :math:`O(m n r d)` with a root, computed once in bounded-memory chunks
    and cached.

    :param prior_covar: :math:`\mathbf K_{**} + \sigma_w^2 \mathbf I`, shape ``(m, m)``.
    :param cross_covar: :math:`\mathbf K_{*X}`, shape ``(m, n)``.
    :param train_z: :math:`\mathbf Z`, shape ``(n, d)``.
    :param factor: :math:`\mathbf L` (``(n, n)`` lower-triangular), :math:`\mathbf R` (``(n, r)``), or
        :math:`\mathbf C` itself as a LinearOperator (solved by CG).
    :param factor_type: ``"cholesky"``, ``"root"`` or ``"solve"``.
    """

    def __init__(
        self,
        prior_covar: LinearOperator | Tensor,
        cross_covar: Tensor,
        train_z: Tensor,
        factor: Tensor,
        factor_type: str = "cholesky",
    ):
        prior_covar = to_linear_operator(prior_covar)
        m, n = cross_covar.shape[-2:]
        if prior_covar.shape[-2:] != torch.Size((m, m)) or train_z.size(-2) != n or factor.size(-2) != n:
            raise ValueError(
                f"Inconsistent shapes: prior {tuple(prior_covar.shape)}, cross {tuple(cross_covar.shape)}, "
                f"train_z {tuple(train_z.shape)}, factor {tuple(factor.shape)}."
            )
        # every argument carries the full batch shape (as views), so that linear_operator's batch indexing,
        # permutation and expansion, which act on each argument alike, see matching batch dimensions
        batch = torch.broadcast_shapes(
            prior_covar.batch_shape, cross_covar.shape[:-2], train_z.shape[:-2], factor.shape[:-2]
        )
        prior_covar = prior_covar if prior_covar.batch_shape == batch else prior_covar.expand(*batch, m, m)
        cross_covar = cross_covar if cross_covar.shape[:-2] == batch else cross_covar.expand(*batch, m, n)
        train_z = train_z if train_z.shape[:-2] == batch else train_z.expand(*batch, *train_z.shape[-2:])
        factor = factor if factor.shape[:-2] == batch else factor.expand(*batch, *factor.shape[-2:])
        super().__init__(prior_covar, cross_covar, train_z, factor, factor_type=factor_type)
        self.prior_covar = prior_covar
        self.cross_covar = cross_covar
        self.train_z = train_z
        self._init_factor(factor, factor_type)

    def _transpose_nonbatch(self) -> LinearOperator:
        # the reduction Bᵀ C⁻¹ B is symmetric by construction; the prior is transposed so that gradients with respect
        # to a (numerically) non-symmetric prior tensor are those of the dense matrix
        return self.__class__(
            self.prior_covar._transpose_nonbatch(), self.cross_covar, self.train_z, self.factor, self.factor_type
        )

    @property
    def num_points(self) -> int:
        return self.cross_covar.size(-2)

    @property
    def num_features(self) -> int:
        return self.train_z.size(-1)

    @property
    def dtype(self) -> torch.dtype:
        return self.cross_covar.dtype

    @property
    def device(self) -> torch.device:
        return self.cross_covar.device

    def _size(self) -> torch.Size:
        md = self.num_points * self.num_features
        return torch.Size((*self.cross_covar.shape[:-2], md, md))

    # ------------------------------------------------------------------ B = [k(x_p, X) ⊙ z_l]
    def _b_rows(self, points: slice) -> Tensor:
        return self.cross_covar[..., points, :].unsqueeze(-2) * self.train_z.mT.unsqueeze(-3)

    def _b_rows_into(self, points: slice, out: Tensor) -> Tensor:
        return torch.mul(self.cross_covar[..., points, :].unsqueeze(-2), self.train_z.mT.unsqueeze(-3), out=out)

    @cached(name="root_times_z")
    def _root_times_z(self) -> Tensor | None:
        r""":math:`[\mathbf R \odot \mathbf z_l]_l` (``(*batch, n, r·d)``), formed once for all chunks of points;
        ``None`` when it would exceed ``2 * max_block_elements`` scalars
        (:class:`gpytorch_explain.settings.max_block_elements`)."""
        n, d = self.train_z.shape[-2:]
        r = self.factor.size(-1)
        if self.factor.shape[:-2].numel() * n * r * d > block_budget("weight_root_z"):
            return None
        return (self.factor.unsqueeze(-1) * self.train_z.unsqueeze(-2)).reshape(*self.factor.shape[:-2], n, r * d)

    def _elements_per_point(self) -> int:
        if self.factor_type == "root" and self._root_times_z() is not None:
            return self.factor.size(-1) * self.num_features  # chunks only hold their (r·d)-wide results
        return super()._elements_per_point()

    def _root_times_b(self, points: slice) -> Tensor:
        # Rᵀ (k_p ⊙ z_l) = k_pᵀ (R ⊙ z_l): one product with the n x (r·d) matrix, shared by all chunks
        rz = self._root_times_z()
        if rz is None:  # too large to hold: rows of B times R, chunk by chunk
            return super()._root_times_b(points)
        r, d = self.factor.size(-1), self.num_features
        w = self.cross_covar[..., points, :] @ rz  # (P, r*d)
        return w.reshape(*w.shape[:-1], r, d).transpose(-2, -1)  # (P, d, r)

    def _bt_matmul(self, rhs: Tensor) -> Tensor:
        m, d, t = self.num_points, self.num_features, rhs.size(-1)
        u = self.cross_covar.mT @ rhs.reshape(*rhs.shape[:-2], m, d * t)  # (n, d*t)
        return (u.reshape(*u.shape[:-1], d, t) * self.train_z.unsqueeze(-1)).sum(-2)

    def _b_matmul(self, rhs: Tensor) -> Tensor:
        n, d, t = self.num_train, self.num_features, rhs.size(-1)
        back = self.cross_covar @ (self.train_z.unsqueeze(-1) * rhs.unsqueeze(-2)).reshape(*rhs.shape[:-2], n, d * t)
        return back.reshape(*back.shape[:-2], self.num_points * d, t)

    # ------------------------------------------------------------------ prior (K** + σw² I) ⊗ I_d
    def _prior_point_blocks(self) -> Tensor:
        eye = torch.eye(self.num_features, dtype=self.dtype, device=self.device)
        return self.prior_covar._diagonal()[..., None, None] * eye

    def _prior_dense(self) -> Tensor:
        # (K** + σw² I) ⊗ I_d by broadcasting (torch.kron rejects the views a transpose or a batch expansion gives)
        return kron_identity(self.prior_covar.to_dense(), self.num_features)

    def _prior_matmul(self, rhs: Tensor) -> Tensor:
        m, d, t = self.num_points, self.num_features, rhs.size(-1)
        res = self.prior_covar._matmul(rhs.reshape(*rhs.shape[:-2], m, d * t))
        return res.reshape(*res.shape[:-2], m * d, t)
