#!/usr/bin/env python3
r"""Lazy joint posterior covariance of GPX local weights."""

from __future__ import annotations

import torch
from gpytorch import settings as gsettings
from linear_operator.operators import LinearOperator, to_linear_operator
from linear_operator.utils.memoize import cached
from torch import Tensor

from ..settings import derived_solve_tolerance

__all__ = ["WeightPosteriorLinearOperator"]

#: number of scalars processed per chunk when forming the reduction term
_CHUNK_ELEMENTS = 2**22


class WeightPosteriorLinearOperator(LinearOperator):
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

    Nothing of size :math:`md \times md` is formed unless :meth:`to_dense` is called. A product
    with an :math:`md \times t` matrix costs :math:`O(mndt)` plus one solve; the per-point
    :math:`d \times d` blocks (:meth:`point_blocks`) and hence the diagonal cost
    :math:`O(m n^2 d)` with a Cholesky factor and :math:`O(m n r d)` with a root, computed once
    in bounded-memory chunks and cached.

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
        if factor_type not in ("cholesky", "root", "solve"):
            raise ValueError(f"factor_type must be 'cholesky', 'root' or 'solve', got {factor_type!r}.")
        prior_covar = to_linear_operator(prior_covar)
        m, n = cross_covar.shape[-2:]
        if prior_covar.shape[-2:] != torch.Size((m, m)) or train_z.size(-2) != n or factor.size(-2) != n:
            raise ValueError(
                f"Inconsistent shapes: prior {tuple(prior_covar.shape)}, cross {tuple(cross_covar.shape)}, "
                f"train_z {tuple(train_z.shape)}, factor {tuple(factor.shape)}."
            )
        super().__init__(prior_covar, cross_covar, train_z, factor, factor_type=factor_type)
        self.prior_covar = prior_covar
        self.cross_covar = cross_covar
        self.train_z = train_z
        self.factor = factor
        self.factor_type = factor_type

    @property
    def num_points(self) -> int:
        return self.cross_covar.size(-2)

    @property
    def num_features(self) -> int:
        return self.train_z.size(-1)

    def _size(self) -> torch.Size:
        md = self.num_points * self.num_features
        return torch.Size((*self.cross_covar.shape[:-2], md, md))

    @property
    def dtype(self) -> torch.dtype:
        return self.cross_covar.dtype

    @property
    def device(self) -> torch.device:
        return self.cross_covar.device

    def _transpose_nonbatch(self) -> LinearOperator:
        return self

    # ------------------------------------------------------------------ helpers
    def _apply_inverse(self, rhs: Tensor) -> Tensor:
        r""":math:`\mathbf C^{-1}` (or its root approximation) times ``rhs`` (``(n, t)``)."""
        if self.factor_type == "cholesky":
            return torch.cholesky_solve(rhs, self.factor, upper=False)
        if self.factor_type == "solve":
            tol = derived_solve_tolerance(self.dtype)
            max_iter = max(gsettings.max_cg_iterations.value(), 2 * rhs.size(-2))
            with gsettings.cg_tolerance(tol), gsettings.max_cg_iterations(max_iter):
                return self.factor.solve(rhs)
        return self.factor @ (self.factor.mT @ rhs)

    def _needs_grad(self) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in self.representation())

    def _b_rows(self, points: slice) -> Tensor:
        r"""Rows of :math:`\mathbf B^\top` for a range of points, ``(|P|, d, n)``.

        Row :math:`(p, l)` is :math:`k(\mathbf x_p, \mathbf X) \odot \mathbf z_l`.
        """
        return self.cross_covar[..., points, :].unsqueeze(-2) * self.train_z.mT.unsqueeze(-3)

    def _factor_times_b(self, points: slice, buffer: Tensor | None = None) -> Tensor:
        r"""Columns of :math:`\mathbf F^\top \mathbf B` for a range of points, shape ``(|P|, d, r)``.

        :math:`\mathbf F = \mathbf L^{-\top}` (so :math:`\mathbf F^\top\mathbf B = \mathbf L^{-1}\mathbf B`) or
        :math:`\mathbf F = \mathbf R`. The right-hand sides are laid out column-major for the triangular
        solve; with a ``buffer`` (no autograd) they are formed and solved in place.
        """
        cross = self.cross_covar[..., points, :]  # (P, n)
        num_p = cross.size(-2)
        n, d = self.train_z.shape[-2:]
        if self.factor_type == "cholesky":
            # rows (p, l) of Bᵀ are k(x_p, X) ⊙ z_l: a contiguous (P·d, n) block, i.e. B column-major
            zt = self.train_z.mT.unsqueeze(-3)
            if buffer is not None:
                bt = buffer[..., : num_p * d, :]
                torch.mul(cross.unsqueeze(-2), zt, out=bt.view(*bt.shape[:-2], num_p, d, n))
                torch.linalg.solve_triangular(self.factor, bt.mT, upper=False, out=bt.mT)
                return bt.view(*bt.shape[:-2], num_p, d, n)
            bt = self._b_rows(points).reshape(*cross.shape[:-2], num_p * d, n)
            v = torch.linalg.solve_triangular(self.factor, bt.mT, upper=False)  # (n, P·d)
            return v.mT.reshape(*v.shape[:-2], num_p, d, n)
        r = self.factor.size(-1)
        rz = (self.factor.unsqueeze(-1) * self.train_z.unsqueeze(-2)).reshape(*self.factor.shape[:-2], n, r * d)
        w = cross @ rz  # (P, r*d)
        return w.reshape(*w.shape[:-1], r, d).transpose(-2, -1)  # (P, d, r)

    def _chunks(self):
        n = self.train_z.size(-2)
        r = n if self.factor_type == "cholesky" else self.factor.size(-1)
        per_point = max(r, n) * self.num_features
        step = max(1, _CHUNK_ELEMENTS // max(per_point, 1))
        for start in range(0, self.num_points, step):
            yield slice(start, min(start + step, self.num_points))

    def _buffer(self) -> Tensor | None:
        """A reusable workspace for in-place chunk solves (``None`` when autograd needs the graph)."""
        if self.factor_type != "cholesky" or self._needs_grad() or self.num_points == 0:
            return None
        n, d = self.train_z.shape[-2:]
        step = next(iter(self._chunks())).stop
        return torch.empty(*self.batch_shape, step * d, n, dtype=self.dtype, device=self.device)

    # ------------------------------------------------------------------ blocks
    @cached(name="reduction_blocks")
    def _reduction_blocks(self) -> Tensor:
        d = self.num_features
        blocks = [torch.zeros(*self.batch_shape, 0, d, d, dtype=self.dtype, device=self.device)]
        if self.factor_type == "solve":
            for points in self._chunks():
                bt = self._b_rows(points)  # (P, d, n)
                num_p, n = bt.size(-3), bt.size(-1)
                x = self._apply_inverse(bt.reshape(*bt.shape[:-3], num_p * d, n).mT)  # (n, P·d)
                red = bt @ x.mT.reshape(*x.shape[:-2], num_p, d, n).mT
                blocks.append(0.5 * (red + red.mT))
            return torch.cat(blocks, dim=-3)
        buffer = self._buffer()
        for points in self._chunks():
            v = self._factor_times_b(points, buffer)  # (P, d, r)
            blocks.append(v @ v.mT)
        return torch.cat(blocks, dim=-3)

    def point_blocks(self) -> Tensor:
        r"""The per-point :math:`d \times d` posterior covariance blocks, shape ``(m, d, d)``."""
        prior_diag = self.prior_covar._diagonal()  # (m,)
        eye = torch.eye(self.num_features, dtype=self.dtype, device=self.device)
        return prior_diag[..., None, None] * eye - self._reduction_blocks()

    def _diagonal(self) -> Tensor:
        return self.point_blocks().diagonal(dim1=-2, dim2=-1).reshape(*self.batch_shape, -1)

    # ------------------------------------------------------------------ products
    def _matmul(self, rhs: Tensor) -> Tensor:
        is_vector = rhs.dim() == 1
        if is_vector:
            rhs = rhs.unsqueeze(-1)
        m, d, t = self.num_points, self.num_features, rhs.size(-1)
        r3 = rhs.reshape(*rhs.shape[:-2], m, d, t)
        prior = self.prior_covar._matmul(r3.reshape(*rhs.shape[:-2], m, d * t)).reshape(*rhs.shape[:-2], m, d, t)
        # B rhs : (n, t)
        u = self.cross_covar.mT @ r3.reshape(*rhs.shape[:-2], m, d * t)
        u = u.reshape(*u.shape[:-1], d, t)
        s = (u * self.train_z.unsqueeze(-1)).sum(-2)
        s = self._apply_inverse(s)
        n = s.size(-2)
        back = self.cross_covar @ (self.train_z.unsqueeze(-1) * s.unsqueeze(-2)).reshape(*s.shape[:-2], n, d * t)
        res = (prior - back.reshape(*back.shape[:-1], d, t)).reshape(*rhs.shape[:-2], m * d, t)
        return res.squeeze(-1) if is_vector else res

    @cached
    def to_dense(self) -> Tensor:
        m, d = self.num_points, self.num_features
        eye = torch.eye(d, dtype=self.dtype, device=self.device)
        prior = torch.kron(self.prior_covar.to_dense(), eye)
        if m == 0:
            return prior
        if self.factor_type == "solve":
            bt = self._b_rows(slice(None))
            bt = bt.reshape(*bt.shape[:-3], m * d, bt.size(-1))
            red = bt @ self._apply_inverse(bt.mT)
            return prior - 0.5 * (red + red.mT)
        vs = [self._factor_times_b(points) for points in self._chunks()]
        v = torch.cat(vs, dim=-3)  # (m, d, r)
        v = v.reshape(*v.shape[:-3], m * d, v.size(-1))
        return prior - v @ v.mT
