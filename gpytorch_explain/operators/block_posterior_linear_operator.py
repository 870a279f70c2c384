#!/usr/bin/env python3
r"""Lazy posterior covariance of vector-valued GP functionals, blocked by point."""

from __future__ import annotations

import torch
from gpytorch import settings as gsettings
from linear_operator.operators import LinearOperator
from linear_operator.utils.memoize import cached
from torch import Tensor

from ..settings import block_budget, cg_iterations, derived_solve_tolerance
from ..utils.linalg import shared_matrix, solve_checked, solve_triangular_shared

__all__ = ["BlockPosteriorLinearOperator"]

FACTOR_TYPES = ("cholesky", "root", "solve")


class BlockPosteriorLinearOperator(LinearOperator):
    r"""Base for :math:`\boldsymbol\Sigma = \mathbf P - \mathbf B^\top \mathbf C^{-1} \mathbf B`, interleaved by point.

    :math:`m` points each carry :math:`d` outputs (local weights, gradient components,
    attributions); row ``p * d + l`` is output :math:`l` of point :math:`p`. :math:`\mathbf P` is
    their prior covariance, :math:`\mathbf B` (``n x md``) their covariance with the :math:`n`
    training targets, and :math:`\mathbf C` the training covariance. :math:`\mathbf C^{-1}` enters
    through ``factor``:

    * ``"cholesky"``: :math:`\mathbf L` with :math:`\mathbf C = \mathbf L\mathbf L^\top` (exact);
    * ``"root"``: :math:`\mathbf R` with :math:`\mathbf C^{-1} \approx \mathbf R\mathbf R^\top`
      (GPyTorch's LOVE cache, rank :math:`r`);
    * ``"solve"``: :math:`\mathbf C` itself as a LinearOperator, applied through CG.

    With a symmetric ``middle`` matrix :math:`\mathbf M` the reduction is
    :math:`\mathbf B^\top \mathbf F \mathbf M \mathbf F^\top \mathbf B` instead (:math:`\mathbf F = \mathbf L^{-\top}`
    or :math:`\mathbf R`); variational posteriors use it with :math:`\mathbf M = \mathbf I - \mathbf S`
    in whitened coordinates, which need not be positive semi-definite.

    The per-point :math:`d \times d` blocks (:meth:`point_blocks`, hence the diagonal) are computed
    once, in bounded-memory chunks, and cached; nothing of size :math:`md \times md` is formed
    unless :meth:`to_dense` is called.

    Subclasses provide the prior (``_prior_point_blocks``, ``_prior_dense``,
    ``_prior_matmul``) and the rows of :math:`\mathbf B^\top` (``_b_rows``); they may
    override the products with :math:`\mathbf B` when :math:`\mathbf B` has structure.
    """

    def _init_factor(self, factor, factor_type: str, middle: Tensor | None = None) -> None:
        if factor_type not in FACTOR_TYPES:
            raise ValueError(f"factor_type must be one of {FACTOR_TYPES}, got {factor_type!r}.")
        if middle is not None and factor_type == "solve":
            raise ValueError("A middle matrix needs a 'cholesky' or 'root' factor.")
        self.factor = factor
        self.factor_type = factor_type
        self.middle = middle

    # ------------------------------------------------------------------ interface
    @property
    def num_points(self) -> int:
        raise NotImplementedError

    @property
    def num_features(self) -> int:
        raise NotImplementedError

    @property
    def num_train(self) -> int:
        return self.factor.size(-2)

    def _b_rows(self, points: slice) -> Tensor:
        r"""Rows of :math:`\mathbf B^\top` for a range of points, ``(*batch, |P|, d, n)``."""
        raise NotImplementedError

    def _prior_point_blocks(self) -> Tensor:
        raise NotImplementedError

    def _prior_dense(self) -> Tensor:
        raise NotImplementedError

    def _prior_matmul(self, rhs: Tensor) -> Tensor:
        return self._prior_dense() @ rhs

    def _bt_matmul(self, rhs: Tensor) -> Tensor:
        r""":math:`\mathbf B \mathbf v` for ``rhs`` of shape ``(*batch, md, t)`` → ``(*batch, n, t)``."""
        rows = self._b_rows(slice(None))
        rows = rows.reshape(*rows.shape[:-3], -1, rows.size(-1))
        return rows.mT @ rhs

    def _b_matmul(self, rhs: Tensor) -> Tensor:
        r""":math:`\mathbf B^\top \mathbf s` for ``rhs`` of shape ``(*batch, n, t)`` → ``(*batch, md, t)``."""
        rows = self._b_rows(slice(None))
        return rows.reshape(*rows.shape[:-3], -1, rows.size(-1)) @ rhs

    def _root_times_b(self, points: slice) -> Tensor:
        r""":math:`\mathbf R^\top \mathbf B` for a range of points, ``(*batch, |P|, d, r)``."""
        return self._b_rows(points) @ self.factor.unsqueeze(-3)

    def _b_rows_into(self, points: slice, out: Tensor) -> Tensor:
        """Write ``_b_rows`` into ``out`` (``(*batch, |P|, d, n)``), in place where possible."""
        out.copy_(self._b_rows(points))
        return out

    # ------------------------------------------------------------------ shape
    def _size(self) -> torch.Size:
        md = self.num_points * self.num_features
        return torch.Size((*self.batch_shape, md, md))

    def _transpose_nonbatch(self) -> LinearOperator:
        return self

    # ------------------------------------------------------------------ solves
    def _apply_inverse(self, rhs: Tensor) -> Tensor:
        r""":math:`\mathbf C^{-1}` (or its root approximation) times ``rhs`` (``(*batch, n, t)``)."""
        if self.factor_type == "cholesky":
            # two triangular solves rather than cholesky_solve: the same (lower-triangular) gradient with respect to
            # the factor as the point blocks and to_dense(), which use L⁻¹B; a factor shared by the batch is not
            # copied per member (solve_triangular_shared)
            v = solve_triangular_shared(self.factor, rhs, upper=False)
            if self.middle is not None:
                v = self.middle @ v
            return solve_triangular_shared(self.factor.mT, v, upper=True)
        if self.factor_type == "solve":
            tol = derived_solve_tolerance(self.dtype)
            with gsettings.cg_tolerance(tol), gsettings.max_cg_iterations(cg_iterations(rhs.size(-2))):
                return solve_checked(self.factor, rhs, what="the posterior covariance solve")
        inner = self.factor.mT @ rhs
        if self.middle is not None:
            inner = self.middle @ inner
        return self.factor @ inner

    def _needs_grad(self) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in self.representation())

    def _elements_per_point(self) -> int:
        """Scalars held per point while a chunk of reduction blocks is formed."""
        return max(self.factor.size(-1), self.num_train) * max(self.num_features, 1)

    def _chunks(self):
        per_point = self._elements_per_point()
        step = max(1, block_budget("block_posterior") // max(per_point, 1))
        for start in range(0, self.num_points, step):
            yield slice(start, min(start + step, self.num_points))

    def _factor_times_b(self, points: slice, buffer: Tensor | None = None) -> Tensor:
        r""":math:`\mathbf L^{-1}\mathbf B` or :math:`\mathbf R^\top\mathbf B` for some points, ``(*batch, |P|, d, r)``.

        For the Cholesky factor the right-hand sides are laid out column-major for the triangular
        solve; with a ``buffer`` (no autograd) they are formed and solved in place.
        """
        if self.factor_type == "root":
            return self._root_times_b(points)
        d, n = self.num_features, self.num_train
        if buffer is not None:
            num_p = len(range(*points.indices(self.num_points)))
            # a contiguous prefix of the flat workspace, so that a factor shared by the batch solves all members at
            # once, as columns, in place (torch would copy a broadcast factor per member)
            bt = buffer[: self.batch_shape.numel() * num_p * d * n].view(*self.batch_shape, num_p * d, n)
            self._b_rows_into(points, bt.view(*bt.shape[:-2], num_p, d, n))
            shared = shared_matrix(self.factor)
            if shared is not None:
                flat = bt.view(-1, n)
                torch.linalg.solve_triangular(shared, flat.mT, upper=False, out=flat.mT)
            else:
                torch.linalg.solve_triangular(self.factor, bt.mT, upper=False, out=bt.mT)
            return bt.view(*bt.shape[:-2], num_p, d, n)
        rows = self._b_rows(points)
        num_p = rows.size(-3)
        v = solve_triangular_shared(self.factor, rows.reshape(*rows.shape[:-3], num_p * d, n).mT, upper=False)
        return v.mT.reshape(*v.shape[:-2], num_p, d, n)

    def _buffer(self) -> Tensor | None:
        """A reusable workspace for in-place chunk solves (``None`` when autograd needs the graph)."""
        if self.factor_type != "cholesky" or self._needs_grad() or self.num_points == 0:
            return None
        step = next(iter(self._chunks())).stop
        size = self.batch_shape.numel() * step * self.num_features * self.num_train
        return torch.empty(size, dtype=self.dtype, device=self.device)  # flat: chunks take contiguous prefixes

    # ------------------------------------------------------------------ blocks
    @cached(name="reduction_blocks")
    def _reduction_blocks(self) -> Tensor:
        d = self.num_features
        blocks = [torch.zeros(*self.batch_shape, 0, d, d, dtype=self.dtype, device=self.device)]
        if self.factor_type == "solve":
            for points in self._chunks():
                rows = self._b_rows(points)  # (P, d, n)
                num_p, n = rows.size(-3), rows.size(-1)
                x = self._apply_inverse(rows.reshape(*rows.shape[:-3], num_p * d, n).mT)  # (n, P·d)
                red = rows @ x.mT.reshape(*x.shape[:-2], num_p, d, n).mT
                blocks.append(0.5 * (red + red.mT))
            return torch.cat(blocks, dim=-3)
        buffer = self._buffer()
        for points in self._chunks():
            v = self._factor_times_b(points, buffer)  # (P, d, r)
            blocks.append((v @ self.middle if self.middle is not None else v) @ v.mT)
        return torch.cat(blocks, dim=-3)

    def point_blocks(self) -> Tensor:
        r"""The per-point :math:`d \times d` posterior covariance blocks, shape ``(*batch, m, d, d)``."""
        return self._prior_point_blocks() - self._reduction_blocks()

    def _diagonal(self) -> Tensor:
        return self.point_blocks().diagonal(dim1=-2, dim2=-1).reshape(*self.batch_shape, -1)

    # ------------------------------------------------------------------ products
    def _matmul(self, rhs: Tensor) -> Tensor:
        is_vector = rhs.dim() == 1
        if is_vector:
            rhs = rhs.unsqueeze(-1)
        res = self._prior_matmul(rhs) - self._b_matmul(self._apply_inverse(self._bt_matmul(rhs)))
        return res.squeeze(-1) if is_vector else res

    @cached
    def to_dense(self) -> Tensor:
        m, d = self.num_points, self.num_features
        prior = self._prior_dense()
        if m == 0:
            return prior
        if self.factor_type == "solve":
            rows = self._b_rows(slice(None))
            rows = rows.reshape(*rows.shape[:-3], m * d, rows.size(-1))
            red = rows @ self._apply_inverse(rows.mT)
            return prior - 0.5 * (red + red.mT)
        v = torch.cat([self._factor_times_b(points) for points in self._chunks()], dim=-3)  # (m, d, r)
        v = v.reshape(*v.shape[:-3], m * d, v.size(-1))
        return prior - (v @ self.middle if self.middle is not None else v) @ v.mT
