#!/usr/bin/env python3
r"""Joint posterior covariance of GPX local weights with an inducing-point base kernel."""

from __future__ import annotations

import torch
from linear_operator.operators import LinearOperator, to_linear_operator
from linear_operator.utils.memoize import cached
from torch import Tensor

from ..settings import block_budget
from ..utils.linalg import kron_identity, shared_matrix, solve_triangular_shared

__all__ = ["InducingWeightPosteriorLinearOperator"]


class InducingWeightPosteriorLinearOperator(LinearOperator):
    r"""Posterior covariance of GPX weights :math:`\mathbf w_*` at :math:`m` points, in inducing space.

    With the Nyström base kernel :math:`\mathbf Q = \boldsymbol\Phi\boldsymbol\Phi^\top` of
    :class:`~gpytorch_explain.operators.GPXInducingLinearOperator` (training covariance
    :math:`\mathbf C = \mathbf D + \mathbf R\mathbf R^\top`, :math:`\mathbf R = [\mathbf z_l \odot
    \boldsymbol\Phi]_l`), the cross-covariance of the training targets with :math:`w_{*pl}` is
    :math:`\mathbf R\,(\mathbf e_l \otimes \boldsymbol\phi_p)` where :math:`\boldsymbol\phi_p` is the
    feature vector of test point :math:`p`. Writing :math:`\mathbf E = \mathbf I_d \otimes
    \boldsymbol\Phi_*^\top` (``dM x md``, interleaved columns) and
    :math:`\mathbf A = \mathbf R^\top\mathbf D^{-1}\mathbf R`, the identity
    :math:`\mathbf R^\top\mathbf C^{-1}\mathbf R = \mathbf I - (\mathbf I + \mathbf A)^{-1}` gives

    .. math::

        \operatorname{Cov}[\mathbf w_*] = \mathbf P \otimes \mathbf I_d
        + \mathbf H^\top\mathbf H, \qquad
        \mathbf H = \mathbf L^{-1}\mathbf E, \quad \mathbf L\mathbf L^\top = \mathbf I + \mathbf A,

    with :math:`\mathbf P = \mathbf K_{**} - \mathbf Q_{**} + \sigma_w^2\mathbf I` the part of the prior
    the inducing points do not carry (GPyTorch's SGPR keeps only its diagonal, the "diagonal
    correction"). Both terms are positive semi-definite, so the variances never cancel. A point costs
    :math:`O(d^2M^2)` (a product with the column blocks of :math:`\mathbf L^{-1}`, formed once), independent
    of :math:`n`.

    :param prior_covar: :math:`\mathbf P`, ``(m, m)``.
    :param test_features: :math:`\boldsymbol\Phi_*`, ``(m, M)``.
    :param capacitance_cholesky: :math:`\mathbf L`, ``(dM, dM)`` lower-triangular.
    :param num_features: :math:`d`.
    """

    def __init__(
        self,
        prior_covar: LinearOperator | Tensor,
        test_features: Tensor,
        capacitance_cholesky: Tensor,
        num_features: int,
    ):
        prior_covar = to_linear_operator(prior_covar)
        m, m_ind = test_features.shape[-2:]
        d = int(num_features)
        if prior_covar.shape[-2:] != torch.Size((m, m)) or capacitance_cholesky.shape[-2:] != (d * m_ind, d * m_ind):
            raise ValueError(
                f"Inconsistent shapes: prior {tuple(prior_covar.shape)}, test features {tuple(test_features.shape)}, "
                f"capacitance factor {tuple(capacitance_cholesky.shape)}, d = {d}."
            )
        # every argument carries the full batch shape (as views), so that linear_operator's batch indexing,
        # permutation and expansion, which act on each argument alike, see matching batch dimensions
        batch = torch.broadcast_shapes(
            prior_covar.batch_shape, test_features.shape[:-2], capacitance_cholesky.shape[:-2]
        )
        if prior_covar.batch_shape != batch:
            prior_covar = prior_covar.expand(*batch, m, m)
        if test_features.shape[:-2] != batch:
            test_features = test_features.expand(*batch, m, m_ind)
        if capacitance_cholesky.shape[:-2] != batch:
            capacitance_cholesky = capacitance_cholesky.expand(*batch, d * m_ind, d * m_ind)
        super().__init__(prior_covar, test_features, capacitance_cholesky, num_features=d)
        self.prior_covar = prior_covar
        self.test_features = test_features
        self.capacitance_cholesky = capacitance_cholesky
        self.num_features = d

    @property
    def num_points(self) -> int:
        return self.test_features.size(-2)

    def _size(self) -> torch.Size:
        md = self.num_points * self.num_features
        return torch.Size((*self.test_features.shape[:-2], md, md))

    def _transpose_nonbatch(self) -> LinearOperator:
        # Hᵀ H is symmetric by construction; the prior is transposed so that gradients with respect to a
        # (numerically) non-symmetric prior tensor are those of the dense matrix
        return self.__class__(
            self.prior_covar._transpose_nonbatch(), self.test_features, self.capacitance_cholesky, self.num_features
        )

    # ------------------------------------------------------------------ E and H
    def _e_columns(self, points: slice) -> Tensor:
        r"""Columns of :math:`\mathbf E` for some points, ``(*batch, dM, |P|·d)`` (point-major)."""
        phi = self.test_features[..., points, :]  # (P, M)
        d = self.num_features
        eye = torch.eye(d, dtype=phi.dtype, device=phi.device)
        # E[(l', j), (p, l)] = δ_{l l'} φ_p[j]
        cols = eye[:, None, None, :] * phi.mT[..., None, :, :, None]  # (*batch, d, M, P, d)
        return cols.reshape(*phi.shape[:-2], d * phi.size(-1), phi.size(-2) * d)

    @cached(name="capacitance_cholesky_inverse")
    def _cholesky_inverse(self) -> Tensor:
        r""":math:`\mathbf L^{-1}`, ``(*batch, dM, dM)`` (lower-triangular), once for all points."""
        chol = self.capacitance_cholesky
        eye = torch.eye(chol.size(-1), dtype=chol.dtype, device=chol.device)
        shared = shared_matrix(chol)
        if shared is not None:  # one inverse for the whole batch, not a copy per member
            return torch.linalg.solve_triangular(shared, eye, upper=False).contiguous().expand(chol.shape)
        return torch.linalg.solve_triangular(chol, eye, upper=False).contiguous()  # LAPACK returns it column-major

    def _h_columns(self, points: slice) -> Tensor:
        r""":math:`\mathbf H` for some points, ``(*batch, dM, |P|·d)`` (point-major)."""
        if self._solve_route():
            return solve_triangular_shared(self.capacitance_cholesky, self._e_columns(points), upper=False)
        h = self._h_blocks(points)  # (d, dM, P)
        return h.permute(*range(h.dim() - 3), -2, -1, -3).reshape(*h.shape[:-3], h.size(-2), -1)

    def _solve_route(self) -> bool:
        # a few points: triangular solves with their columns of E beat forming L⁻¹ once
        return 3 * self.num_points * self.num_features < self.capacitance_cholesky.size(-1)

    def _h_blocks(self, points: slice) -> Tensor:
        r""":math:`\mathbf H` for some points by feature, ``(*batch, d, dM, |P|)``.

        Column :math:`(p, l)` of :math:`\mathbf H` is :math:`\mathbf L^{-1}(\mathbf e_l \otimes
        \boldsymbol\phi_p)`: the ``l``-th ``dM x M`` column block of :math:`\mathbf L^{-1}` (zero above
        row :math:`lM`, since :math:`\mathbf L^{-1}` is lower-triangular) times :math:`\boldsymbol\phi_p`.
        With :math:`\mathbf L^{-1}` formed once (:math:`(dM)^3/3`), a point costs about :math:`d^2M^2/2`
        instead of the :math:`d^3M^2` of a triangular solve with its :math:`d` columns of :math:`\mathbf E`.
        """
        d = self.num_features
        phi = self.test_features[..., points, :]  # (P, M)
        inv = self._cholesky_inverse()
        m_ind = phi.size(-1)
        batch = torch.broadcast_shapes(inv.shape[:-2], phi.shape[:-2])
        h = phi.new_zeros(*batch, d, inv.size(-1), phi.size(-2))
        for feature in range(d):
            top = feature * m_ind
            h[..., feature, top:, :] = inv[..., top:, top : top + m_ind] @ phi.mT
        return h

    def _chunks(self):
        dm = self.capacitance_cholesky.size(-1)
        step = max(1, block_budget("inducing_weight_posterior") // max(dm * self.num_features, 1))
        for start in range(0, self.num_points, step):
            yield slice(start, min(start + step, self.num_points))

    def _e_matmul(self, rhs: Tensor) -> Tensor:
        r""":math:`\mathbf E\mathbf v`, ``(*batch, md, t)`` → ``(*batch, dM, t)``."""
        m, d, t = self.num_points, self.num_features, rhs.size(-1)
        v = rhs.reshape(*rhs.shape[:-2], m, d, t).transpose(-3, -2)  # (d, m, t)
        res = self.test_features.mT.unsqueeze(-3) @ v  # (*batch, d, M, t): the batch of both
        return res.reshape(*res.shape[:-3], -1, t)

    def _et_matmul(self, rhs: Tensor) -> Tensor:
        r""":math:`\mathbf E^\top\mathbf u`, ``(*batch, dM, t)`` → ``(*batch, md, t)``."""
        d, t = self.num_features, rhs.size(-1)
        u = rhs.reshape(*rhs.shape[:-2], d, self.test_features.size(-1), t)
        res = self.test_features.unsqueeze(-3) @ u  # (*batch, d, m, t)
        return res.transpose(-3, -2).reshape(*res.shape[:-3], -1, t)

    # ------------------------------------------------------------------ blocks
    @cached(name="posterior_point_blocks")
    def point_blocks(self) -> Tensor:
        r"""The per-point :math:`d \times d` posterior covariance blocks, shape ``(*batch, m, d, d)``."""
        d = self.num_features
        eye = torch.eye(d, dtype=self.dtype, device=self.device)
        prior = self.prior_covar._diagonal()[..., None, None] * eye
        parts = [torch.zeros(*self.batch_shape, 0, d, d, dtype=self.dtype, device=self.device)]
        for points in self._chunks():
            if self._solve_route():
                h = self._h_columns(points)  # (dM, P·d)
                h = h.reshape(*h.shape[:-1], -1, d).movedim(-2, -3)  # (P, dM, d)
            else:
                h = self._h_blocks(points)  # (d, dM, P)
                h = h.permute(*range(h.dim() - 3), -1, -2, -3).contiguous()  # (P, dM, d)
            parts.append(h.mT @ h)
        return prior + torch.cat(parts, dim=-3)

    def _diagonal(self) -> Tensor:
        return self.point_blocks().diagonal(dim1=-2, dim2=-1).reshape(*self.batch_shape, -1)

    def _matmul(self, rhs: Tensor) -> Tensor:
        is_vector = rhs.dim() == 1
        if is_vector:
            rhs = rhs.unsqueeze(-1)
        m, d, t = self.num_points, self.num_features, rhs.size(-1)
        prior = self.prior_covar._matmul(rhs.reshape(*rhs.shape[:-2], m, d * t))
        prior = prior.reshape(*prior.shape[:-2], m * d, t)  # the batch of the prior and of rhs
        chol = self.capacitance_cholesky
        # (L Lᵀ)⁻¹ E v by two triangular solves rather than cholesky_solve: the same gradient with respect to the
        # factor (lower-triangular) as point_blocks() and to_dense(), which use L⁻¹
        inner = solve_triangular_shared(chol, self._e_matmul(rhs), upper=False)
        inner = solve_triangular_shared(chol.mT, inner, upper=True)
        res = prior + self._et_matmul(inner)
        return res.squeeze(-1) if is_vector else res

    @cached
    def to_dense(self) -> Tensor:
        h = torch.cat([self._h_columns(points) for points in self._chunks()], dim=-1)
        return kron_identity(self.prior_covar.to_dense(), self.num_features) + h.mT @ h
