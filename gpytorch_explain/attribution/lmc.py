#!/usr/bin/env python3
r"""Attribution GPs of variational LMC models (GPyTorch's ``LMCVariationalStrategy``).

A linear model of coregionalisation mixes :math:`Q` independent latent GPs :math:`g_q` (each with its own
:math:`q(\mathbf u_q)` under a whitened or unwhitened base strategy) into :math:`T` outputs

.. math::

    f_t(\mathbf x) = \sum_{q=1}^Q a_{qt}\, g_q(\mathbf x), \qquad \mathbf A = (a_{qt}) =
    \texttt{lmc\_coefficients}\ (Q\times T).

Gradients and integrated gradients are linear functionals :math:`\mathcal L`, so
:math:`\mathcal L f_t = \sum_q a_{qt}\,\mathcal L g_q`, and since the :math:`g_q` are independent under
:math:`q`,

.. math::

    \mathbb E[\mathcal L f_t(\mathbf x)] = \sum_q a_{qt}\,\mathbb E[\mathcal L g_q(\mathbf x)], \qquad
    \operatorname{Cov}[\mathcal L f_t(\mathbf x), \mathcal L f_s(\mathbf x')] = \sum_q a_{qt}a_{qs}\,
    \operatorname{Cov}[\mathcal L g_q(\mathbf x), \mathcal L g_q(\mathbf x')],

exactly, with the per-latent attribution posteriors of :mod:`~gpytorch_explain.attribution.variational`.
:meth:`LMCConditioning.functional_posterior` returns the per-task posteriors (batch ``(..., T)``, the
:math:`t = s` blocks, lazily: per-point blocks and products never form the :math:`mD\times mD` matrices);
:func:`lmc_joint_functional_posterior` adds the cross-task covariances (dense).

GPyTorch's LMC predictive adds ``jitter_val`` to the diagonal of :math:`\operatorname{Cov}(\mathbf f)`, white noise
with no derivative; like the base strategies' jitter it is not part of the attribution GPs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gpytorch.distributions import MultivariateNormal
from gpytorch.models import ApproximateGP
from linear_operator.operators import DenseLinearOperator, LinearOperator
from torch import Tensor

from .attribution_distribution import AttributionDistribution
from .derived import DEFAULT_ORDER
from .functionals import Functional
from .variational import VariationalConditioning

__all__ = ["LMCConditioning", "MixedAttributionLinearOperator", "lmc_joint_functional_posterior"]


class MixedAttributionLinearOperator(LinearOperator):
    r""":math:`\boldsymbol\Sigma_t = \sum_q w_{qt}\boldsymbol\Sigma_q` for a batch of latent attribution covariances.

    :param base: Covariances of the :math:`Q` latents, batch ``(*rest, Q)`` (the latent dimension last), each
        ``mD × mD``, interleaved (an :class:`~gpytorch_explain.operators.AttributionPosteriorLinearOperator`).
    :param weights: :math:`w_{qt}`, ``(*rest, Q, T)`` (broadcastable).
    :return: An operator of batch ``(*rest, T)``. :meth:`point_blocks` (hence the diagonal) and products use the
        base's lazy operations; :meth:`to_dense` forms the base densely.
    """

    def __init__(self, base: LinearOperator, weights: Tensor):
        super().__init__(base, weights)
        self.base = base
        self.weights = weights

    def _size(self) -> torch.Size:
        rest = torch.broadcast_shapes(self.base.batch_shape[:-1], self.weights.shape[:-2])
        return torch.Size((*rest, self.weights.size(-1), *self.base.shape[-2:]))

    def _transpose_nonbatch(self) -> LinearOperator:
        return self

    def _mix(self, per_latent: Tensor, tail: int) -> Tensor:
        """``per_latent`` ``(*rest, Q, *tail)`` -> ``(*rest, T, *tail)`` with the weights."""
        w = self.weights.reshape(*self.weights.shape, *([1] * tail))  # (*rest, Q, T, 1...)
        return (per_latent.unsqueeze(-tail - 1) * w).sum(-tail - 2)

    def point_blocks(self) -> Tensor:
        """The per-point ``D × D`` blocks, ``(*rest, T, m, D, D)``."""
        return self._mix(self.base.point_blocks(), 3)

    def _diagonal(self) -> Tensor:
        return self.point_blocks().diagonal(dim1=-2, dim2=-1).reshape(*self.shape[:-1])

    def _matmul(self, rhs: Tensor) -> Tensor:
        # rhs (*rest, T, mD, k): each latent q applies Σ_q to every task's columns, then the weights mix
        T, k = self.weights.size(-1), rhs.size(-1)
        rhs = rhs.expand(*self.shape[:-1], k)
        cols = rhs.movedim(-3, -2).reshape(*rhs.shape[:-3], rhs.size(-2), T * k)  # (*rest, mD, T k)
        Q = self.weights.size(-2)
        cols = cols.unsqueeze(-3).expand(*cols.shape[:-2], Q, *cols.shape[-2:])
        prod = self.base.matmul(cols)  # (*rest, Q, mD, T k)
        prod = prod.reshape(*prod.shape[:-1], T, k).movedim(-2, -3)  # (*rest, Q, T, mD, k)
        return (prod * self.weights[..., None, None]).sum(-4)

    def to_dense(self) -> Tensor:
        return self._mix(self.base.to_dense(), 2)


@dataclass(frozen=True)
class LMCConditioning:
    r"""The base strategy's :class:`~gpytorch_explain.attribution.variational.VariationalConditioning` (over the
    :math:`Q` latents) and the mixing :math:`\mathbf A`; same interface (``functional_posterior``, ``latent``).

    :param base: Conditioning of the latents :math:`g_q`, batch dimension ``latent_dim`` of size :math:`Q`.
    :param coefficients: ``lmc_coefficients`` ``(*batch, T)`` with :math:`Q` at ``latent_dim`` of ``batch``.
    :param latent_dim: The (negative) batch dimension of the latents.
    """

    base: VariationalConditioning
    coefficients: Tensor
    latent_dim: int

    @property
    def inducing_points(self) -> Tensor:
        return self.base.inducing_points

    @property
    def num_tasks(self) -> int:
        return self.coefficients.size(-1)

    def _mixing(self, batch_ndim: int) -> Tensor:
        """:math:`\\mathbf A` as ``(*rest, Q, T)`` for results with ``batch_ndim`` batch dimensions."""
        coef = self.coefficients.movedim(self.latent_dim - 1, -2)  # (*rest_c, Q, T)
        missing = batch_ndim - (coef.dim() - 1)
        return coef.reshape(*([1] * max(missing, 0)), *coef.shape)

    def _latent_last(self, t: Tensor, batch_ndim: int, tail: int) -> Tensor:
        """Move the latent batch dimension of ``t`` (``batch_ndim`` batch dims, ``tail`` event dims) last."""
        return t.movedim(batch_ndim + self.latent_dim, batch_ndim - 1) if batch_ndim else t

    def functional_posterior(self, functional: Functional, x: Tensor, order: int = DEFAULT_ORDER):
        r"""Per-task :math:`q(\mathcal L f_t(\mathbf x))`, an ``AttributionDistribution`` with mean
        ``(*rest, T, m, D)`` (``(T, m, D)`` for the usual single latent batch dimension) and a lazy covariance."""

        post = self.base.functional_posterior(functional, x, order=order)
        batch_ndim = len(post.mean.shape[:-2])
        A = self._mixing(batch_ndim).to(post.mean)
        mean = self._latent_last(post.mean, batch_ndim, 2)  # (*rest, Q, m, D)
        mean = (mean.unsqueeze(-3) * A[..., None, None]).sum(-4)  # (*rest, T, m, D)
        covar = post.lazy_covariance_matrix
        perm = list(range(batch_ndim))
        latent_axis = batch_ndim + self.latent_dim
        if latent_axis != batch_ndim - 1:
            perm.append(perm.pop(latent_axis))
            covar = covar.permute(*perm, batch_ndim, batch_ndim + 1)
        covar = MixedAttributionLinearOperator(covar, A * A)
        return AttributionDistribution(mean, covar, interleaved=True)

    def latent(self, points: Tensor) -> tuple[Tensor, Tensor]:
        r"""Per-task mean ``(*rest, T, P)`` and covariance ``(*rest, T, P, P)`` of :math:`q(f_t)` at ``points``."""
        mean, cov = self.base.latent(points)
        batch_ndim = mean.dim() - 1
        A = self._mixing(batch_ndim).to(mean)
        mean = self._latent_last(mean, batch_ndim, 1)
        cov = self._latent_last(cov, batch_ndim, 2)
        return (mean.unsqueeze(-2) * A[..., None]).sum(-3), (cov.unsqueeze(-3) * (A * A)[..., None, None]).sum(-4)

    def joint_functional_posterior(self, functional: Functional, x: Tensor, order: int = DEFAULT_ORDER):
        r"""Joint :math:`q` of :math:`\mathcal L f_t(\mathbf x_p)` over all tasks, points and features (dense).

        :return: ``MultivariateNormal`` with mean ``(*rest, T * m * D)`` (index ``(t * m + p) * D + i``) and
            covariance :math:`\sum_q (\mathbf a_q\mathbf a_q^\top)\otimes\boldsymbol\Sigma_q` (a dense operator; it is
            singular when :math:`Q < T`).
        """
        post = self.base.functional_posterior(functional, x, order=order)
        batch_ndim = len(post.mean.shape[:-2])
        A = self._mixing(batch_ndim).to(post.mean)  # (*rest, Q, T)
        mean = self._latent_last(post.mean, batch_ndim, 2)
        mean = (mean.unsqueeze(-3) * A[..., None, None]).sum(-4)  # (*rest, T, m, D)
        dense = self._latent_last(post.lazy_covariance_matrix.to_dense(), batch_ndim, 2)  # (*rest, Q, mD, mD)
        outer = A.unsqueeze(-1) * A.unsqueeze(-2)  # (*rest, Q, T, T)
        cov = torch.einsum("...qts,...qij->...tisj", outer, dense)
        n = A.size(-1) * dense.size(-1)
        cov = cov.reshape(*cov.shape[:-4], n, n)
        # rank Q·mD at most (< T·mD when Q < T): kept as an operator, no Cholesky at construction
        return MultivariateNormal(mean.reshape(*mean.shape[:-3], -1), DenseLinearOperator(0.5 * (cov + cov.mT)))


def lmc_joint_functional_posterior(
    model: ApproximateGP, functional: Functional, x: Tensor, order: int = DEFAULT_ORDER
) -> MultivariateNormal:
    r"""The joint posterior of a gradient / IG functional over all tasks of a variational LMC model.

    :param model: An ``ApproximateGP`` in eval mode whose ``variational_strategy`` is an
        ``LMCVariationalStrategy`` around a ``VariationalStrategy`` (or another supported base strategy).
    :param functional: ``GradientFunctional()`` or ``IntegratedGradientFunctional(baseline)``.
    :param x: Points ``(m, D)``.
    :return: ``MultivariateNormal`` over the flattened ``(T, m, D)`` attributions (index ``(t * m + p) * D + i``),
        with the cross-task covariances :math:`\sum_q a_{qt}a_{qs}\operatorname{Cov}[\mathcal L g_q]`.

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch.variational import CholeskyVariationalDistribution, LMCVariationalStrategy
        >>> from gpytorch_explain.attribution import GradientFunctional
        >>> class LMC(gpytorch.models.ApproximateGP):
        ...     def __init__(self, Z):
        ...         dist = CholeskyVariationalDistribution(Z.size(-2), batch_shape=torch.Size([2]))
        ...         base = gpytorch.variational.VariationalStrategy(self, Z, dist)
        ...         super().__init__(LMCVariationalStrategy(base, num_tasks=3, num_latents=2))
        ...         self.covar_module = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([2]))
        ...     def forward(self, x):
        ...         return gpytorch.distributions.MultivariateNormal(torch.zeros(x.shape[:-1]).to(x),
        ...                                                         self.covar_module(x))
        >>> model = LMC(torch.rand(2, 6, 2, dtype=torch.float64)).double().eval()
        >>> joint = lmc_joint_functional_posterior(model, GradientFunctional(), torch.rand(4, 2, dtype=torch.float64))
        >>> joint.mean.shape, joint.covariance_matrix.shape
        (torch.Size([24]), torch.Size([24, 24]))
    """
    from .variational import _check_points, variational_conditioning

    cond = variational_conditioning(model)
    if not isinstance(cond, LMCConditioning):
        raise NotImplementedError(
            f"lmc_joint_functional_posterior needs an LMCVariationalStrategy, got "
            f"{type(model.variational_strategy).__name__}; use variational_functional_posterior."
        )
    x = _check_points(x, cond.inducing_points)
    return cond.joint_functional_posterior(functional, x, order=order)
