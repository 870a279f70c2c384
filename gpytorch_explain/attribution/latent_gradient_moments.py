#!/usr/bin/env python3
r"""The joint Gaussian of a variational classifier's latent and its gradient at each point, :math:`q(f, \nabla f)`,
the input of the class-probability attributions of :mod:`gpytorch_explain.attribution.classification`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gpytorch.models import ApproximateGP
from gpytorch.variational import LMCVariationalStrategy
from linear_operator import to_dense
from torch import Tensor

from ..utils.gp import kernel_diag
from .derived import DerivedCovariance, functional_mean
from .functionals import GradientFunctional
from .variational import VariationalConditioning, _check_points, variational_conditioning

__all__ = ["LatentGradientMoments", "latent_gradient_moments"]

_SUPPORTED = (
    "supported: BernoulliLikelihood (probit link, or logit via link='logit') with a single-output ApproximateGP, "
    "and SoftmaxLikelihood(num_classes=C, mixing_weights=False) with an ApproximateGP whose "
    "IndependentMultitaskVariationalStrategy has num_tasks == C; the base strategy must be a VariationalStrategy, "
    "LargeBatchVariationalStrategy or UnwhitenedVariationalStrategy"
)


@dataclass(frozen=True)
class LatentGradientMoments:
    r"""The joint Gaussian of :math:`(f(\mathbf x_p), \partial_1 f(\mathbf x_p), \dots, \partial_D f(\mathbf x_p))`
    under :math:`q`, per point (no cross-point covariances).

    Leading ``*batch`` dimensions are the model's (``(C,)`` for independent multitask latents).

    :param mean: :math:`\mu_f = \mathbb E[f(\mathbf x_p)]`, ``(*batch, m)``.
    :param variance: :math:`v = \operatorname{Var} f(\mathbf x_p)`, ``(*batch, m)``.
    :param gradient_mean: :math:`\mu_i = \mathbb E[\partial_i f(\mathbf x_p)]`, ``(*batch, m, D)``.
    :param gradient_cross: :math:`c_i = \operatorname{Cov}(\partial_i f(\mathbf x_p), f(\mathbf x_p))`,
        ``(*batch, m, D)``.
    :param gradient_covariance: :math:`\operatorname{Cov}(\partial_i f, \partial_j f)` at each point,
        ``(*batch, m, D, D)`` (only with ``full=True``).
    """

    mean: Tensor
    variance: Tensor
    gradient_mean: Tensor
    gradient_cross: Tensor
    gradient_covariance: Tensor | None = None

    def joint_covariance(self) -> Tensor:
        r"""The ``(D+1) × (D+1)`` covariance of :math:`(f, \partial_1 f, \dots, \partial_D f)` per point,
        ``(*batch, m, D + 1, D + 1)`` (needs ``full=True``)."""
        if self.gradient_covariance is None:
            raise ValueError("joint_covariance needs the gradient covariance: call latent_gradient_moments(full=True).")
        top = torch.cat([self.variance.unsqueeze(-1), self.gradient_cross], dim=-1).unsqueeze(-2)
        bottom = torch.cat([self.gradient_cross.unsqueeze(-1), self.gradient_covariance], dim=-1)
        return torch.cat([top, bottom], dim=-2)


# =============================================================================================
# the joint Gaussian of (f, ∇f)
# =============================================================================================
def _check_model(model) -> None:
    if not isinstance(model, ApproximateGP):
        raise NotImplementedError(
            f"Classification attributions need a variational model (gpytorch ApproximateGP), got "
            f"{type(model).__name__}; {_SUPPORTED}."
        )


def latent_gradient_moments(model: ApproximateGP, x: Tensor, full: bool = False, chunk_size: int = 256):
    r"""Per-point joint Gaussian of the latent and its gradient under the variational posterior :math:`q`.

    With the whitened quantities of :func:`~gpytorch_explain.attribution.variational.variational_conditioning`
    (:math:`\mathbf L`, :math:`\mathbf a`, :math:`\mathbf M = \mathbf I - \mathbf S_w`),
    :math:`\mathbf v_f = \mathbf L^{-1}\mathbf k(\mathbf Z, \mathbf x)` and
    :math:`\mathbf v_i = \mathbf L^{-1}\partial_i\mathbf k(\mathbf Z, \mathbf x)`:

    .. math::

        \mu_f = \mu(\mathbf x) + \mathbf k(\mathbf x, \mathbf Z)\mathbf a, \quad
        \mu_i = \partial_i\mu(\mathbf x) + \partial_i\mathbf k(\mathbf x, \mathbf Z)\mathbf a, \quad
        v = k(\mathbf x, \mathbf x) - \mathbf v_f^\top\mathbf M\mathbf v_f, \quad
        c_i = \partial_i k(\mathbf x, \mathbf x')\big|_{\mathbf x' = \mathbf x} - \mathbf v_i^\top\mathbf M\mathbf v_f .

    :param model: A supported ``ApproximateGP`` in eval mode.
    :param x: Points ``(m, D)`` in the model's dtype.
    :param full: Also return the per-point gradient covariances ``(*batch, m, D, D)``.
    :param chunk_size: Points per block (bounds the memory of the prior cross-covariances).
    :return: :class:`LatentGradientMoments` (detached).

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain.attribution import latent_gradient_moments
        >>> class SVGP(gpytorch.models.ApproximateGP):
        ...     def __init__(self, Z):
        ...         dist = gpytorch.variational.CholeskyVariationalDistribution(Z.size(0))
        ...         super().__init__(gpytorch.variational.VariationalStrategy(self, Z, dist))
        ...         self.mean_module = gpytorch.means.ConstantMean()
        ...         self.covar_module = gpytorch.kernels.RBFKernel()
        ...     def forward(self, x):
        ...         return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))
        >>> model = SVGP(torch.rand(6, 3, dtype=torch.float64)).double().eval()
        >>> mom = latent_gradient_moments(model, torch.rand(4, 3, dtype=torch.float64), full=True)
        >>> mom.mean.shape, mom.gradient_cross.shape, mom.joint_covariance().shape
        (torch.Size([4]), torch.Size([4, 3]), torch.Size([4, 4, 4]))
    """
    _check_model(model)
    if isinstance(getattr(model, "variational_strategy", None), LMCVariationalStrategy):
        raise NotImplementedError(
            "latent_gradient_moments takes a single latent GP or independent ones; for LMCVariationalStrategy models "
            "use PosteriorGradient (per task) or gpytorch_explain.attribution.lmc.lmc_joint_functional_posterior."
        )
    with torch.no_grad():
        cond = variational_conditioning(model)
        x = _check_points(x, cond.inducing_points)
        if x.dim() != 2:
            raise ValueError(f"x must be (m, D), got shape {tuple(x.shape)}.")
        return _moments(cond, x, full=full, chunk_size=chunk_size)


def _moments(cond: VariationalConditioning, x: Tensor, full: bool, chunk_size: int) -> LatentGradientMoments:
    parts = [_moments_block(cond, x[s : s + chunk_size], full) for s in range(0, x.size(0), max(1, chunk_size))]
    if not parts:
        raise ValueError("x has no points.")
    cat = [torch.cat([p[j] for p in parts], dim=dim) for j, dim in enumerate((-1, -1, -2, -2))]
    cov = torch.cat([p[4] for p in parts], dim=-3) if full else None
    return LatentGradientMoments(*cat, gradient_covariance=cov)


def _moments_block(cond: VariationalConditioning, x: Tensor, full: bool) -> tuple[Tensor, ...]:
    kernel, mean_module = cond.kernel, cond.mean_module
    Z, L, a, M = cond.inducing_points, cond.cholesky, cond.weights, cond.middle
    m, D = x.shape
    derived = DerivedCovariance(kernel, GradientFunctional())
    rows = derived.cross(x, Z)  # (*b, m, D, u)
    cross = to_dense(kernel(Z, x))  # (*b, u, m)
    prior_var = to_dense(kernel_diag(kernel, x))  # (*b, m): a batched kernel with m = C (see kernel_diag)
    prior_c = torch.diagonal(derived.cross(x, x), dim1=-3, dim2=-1).mT  # (*b, m, D)
    batch = torch.broadcast_shapes(
        rows.shape[:-3], cross.shape[:-2], prior_var.shape[:-1], L.shape[:-2], a.shape[:-1], M.shape[:-2]
    )
    u = L.size(-1)
    rows = rows.expand(*batch, m, D, u)
    cross = cross.expand(*batch, u, m)
    L = L.expand(*batch, u, u)
    M = M.expand(*batch, u, u)
    a = a.expand(*batch, u)

    f_mean = (cross.mT @ a.unsqueeze(-1)).squeeze(-1)
    g_mean = (rows @ a[..., None, :, None]).squeeze(-1)
    if mean_module is not None:
        f_mean = f_mean + mean_module(x)
        g_mean = g_mean + functional_mean(mean_module, GradientFunctional(), x)
    Vf = torch.linalg.solve_triangular(L, cross, upper=False)  # (*b, u, m)
    MVf = M @ Vf
    f_var = (prior_var - (Vf * MVf).sum(-2)).clamp_min(0.0)
    Vg = torch.linalg.solve_triangular(L, rows.reshape(*batch, m * D, u).mT, upper=False)
    Vg = Vg.mT.reshape(*batch, m, D, u)
    g_cross = prior_c - (Vg * MVf.mT.unsqueeze(-2)).sum(-1)
    out = [f_mean.expand(*batch, m), f_var.expand(*batch, m), g_mean.expand(*batch, m, D), g_cross]
    if full:
        cov = derived.point(x) - Vg @ M.unsqueeze(-3) @ Vg.mT
        out.append(0.5 * (cov + cov.mT))
    return tuple(out)
