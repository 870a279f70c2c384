#!/usr/bin/env python3
r"""Derived covariances of gradient and integrated-gradient functionals, by kernel structure."""

from __future__ import annotations

import math

import torch
from gpytorch.kernels import (
    AdditiveKernel,
    InducingPointKernel,
    Kernel,
    LinearKernel,
    RBFKernel,
    RFFKernel,
    ScaleKernel,
)
from gpytorch.means import ConstantMean, LinearMean, Mean, ZeroMean
from torch import Tensor

from . import kernel_derivatives, path_integrals, rbf
from ._quadrature import gauss_legendre
from ._roles import kernel_role
from .functionals import Functional, GradientFunctional, IntegratedGradientFunctional

__all__ = ["DerivedCovariance", "functional_mean", "uses_quadrature"]

#: default Gauss–Legendre order of the generic path integrals
DEFAULT_ORDER = 32


class DerivedCovariance:
    r"""Covariances of :math:`\mathcal L f` for :math:`f \sim \mathcal{GP}(0, k)`, for all features at once.

    For a functional :math:`\mathcal L` with components :math:`\mathcal L_i` (the gradient
    :math:`\partial_i`, or integrated gradients :math:`\mathrm{IG}_i` with baselines):

    * :meth:`cross`: :math:`\operatorname{Cov}(\mathcal L_i f(\mathbf x_p), f(\mathbf X_j))`, ``(*batch, m, D, n)``;
    * :meth:`joint`: :math:`\operatorname{Cov}(\mathcal L_i f(\mathbf x_p), \mathcal L_j f(\mathbf x'_q))`,
      ``(*batch, m, D, m', D)``;
    * :meth:`point`: the per-point blocks of :meth:`joint` at :math:`\mathbf x = \mathbf x'`, ``(*batch, m, D, D)``.

    Closed forms are used for ``RBFKernel`` (isotropic and ARD, numerically stable integrated
    forms), ``LinearKernel`` and ``RFFKernel``; ``ScaleKernel`` and sums (``AdditiveKernel``,
    ``k1 + k2``) are handled by linearity; any other differentiable kernel goes through the
    generic path (autograd derivatives, Gauss–Legendre path integrals of order ``order``).
    An ``InducingPointKernel`` anywhere in ``kernel`` raises ``NotImplementedError`` (SGPR models are handled
    by :func:`~gpytorch_explain.attribution.sgpr_functional_posterior` with the base kernel).

    :param kernel: The GPyTorch kernel :math:`k`.
    :param functional: :class:`GradientFunctional` or :class:`IntegratedGradientFunctional`.
    :param order: Gauss–Legendre order for the generic path.
    """

    def __init__(
        self, kernel: Kernel, functional: GradientFunctional | IntegratedGradientFunctional, order: int = DEFAULT_ORDER
    ):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a gpytorch Kernel, got {type(kernel).__name__}.")
        if any(isinstance(module, InducingPointKernel) for module in kernel.modules()):
            # its eval-mode covariance adds a non-differentiable diagonal correction at coincident inputs
            raise NotImplementedError(
                "Derived covariances of an InducingPointKernel (SGPR) are not defined here; "
                "PosteriorGradient and PosteriorIntegratedGradients handle SGPR models by conditioning in inducing "
                "space with its base kernel."
            )
        self.kernel = kernel
        self.functional = functional
        self.order = int(order)

    def cross(self, x: Tensor, X: Tensor) -> Tensor:
        r""":math:`\operatorname{Cov}(\mathcal L_i f(\mathbf x_p), f(\mathbf X_j))` for ``x`` ``(*batch, m, D)`` and
        ``X`` ``(*batch, n, D)``: ``(*batch, m, D, n)``."""
        return _derived(self.kernel, self.functional, "cross", (x, X), self.order)

    def joint(self, x1: Tensor, x2: Tensor) -> Tensor:
        r""":math:`\operatorname{Cov}(\mathcal L_i f(\mathbf x_p), \mathcal L_j f(\mathbf x'_q))` for ``x1``
        ``(*batch, m, D)`` and ``x2`` ``(*batch, m', D)``: ``(*batch, m, D, m', D)``."""
        return _derived(self.kernel, self.functional, "joint", (x1, x2), self.order)

    def point(self, x: Tensor) -> Tensor:
        r"""The per-point blocks :math:`\operatorname{Cov}(\mathcal L_i f(\mathbf x_p), \mathcal L_j f(\mathbf x_p))`
        for ``x`` ``(*batch, m, D)``: ``(*batch, m, D, D)``."""
        return _derived(self.kernel, self.functional, "point", (x,), self.order)


def _unwrap_partitioned(kernel: Kernel) -> Kernel:
    """A :class:`~gpytorch_explain.kernels.PartitionedKernel` computes its base kernel's entries (in row blocks),
    so the derived kernels are its base kernel's."""
    from ..kernels.partitioned_kernel import PartitionedKernel

    while type(kernel) is PartitionedKernel and kernel.active_dims is None:
        kernel = kernel.base_kernel
    return kernel


def uses_quadrature(kernel: Kernel, mean: Mean | None = None) -> bool:
    """Whether integrated gradients of ``kernel`` (and ``mean``) need Gauss–Legendre path integrals."""
    kernel = _unwrap_partitioned(kernel)
    role = kernel_role(kernel)
    if role is ScaleKernel and kernel.active_dims is None:
        return uses_quadrature(kernel.base_kernel, mean)
    if role is AdditiveKernel and kernel.active_dims is None:
        return any(uses_quadrature(k) for k in kernel.kernels) or uses_quadrature_mean(mean)
    if role in (RBFKernel, LinearKernel, RFFKernel):
        return uses_quadrature_mean(mean)
    return True


def uses_quadrature_mean(mean: Mean | None) -> bool:
    return mean is not None and type(mean) not in (ZeroMean, ConstantMean, LinearMean)


# --------------------------------------------------------------------------- dispatch
def _derived(kernel: Kernel, functional: Functional, what: str, args: tuple[Tensor, ...], order: int) -> Tensor:
    kernel = _unwrap_partitioned(kernel)
    role = kernel_role(kernel)
    if role is ScaleKernel and kernel.active_dims is None:
        res = _derived(kernel.base_kernel, functional, what, args, order)
        scale = kernel.outputscale
        return scale.view(*scale.shape, *([1] * (res.dim() - scale.dim()))) * res
    if role is AdditiveKernel and kernel.active_dims is None:
        parts = [_derived(k, functional, what, args, order) for k in kernel.kernels]
        return _sum_broadcast(parts)
    if role in (RBFKernel, LinearKernel, RFFKernel):  # a subclass that overrides forward has no role
        return _closed_form(kernel, functional, what, args)
    return _generic(kernel, functional, what, args, order)


def _sum_broadcast(parts: list[Tensor]) -> Tensor:
    shape = torch.broadcast_shapes(*(p.shape for p in parts))
    out = parts[0].expand(shape).clone()
    for p in parts[1:]:
        out = out + p
    return out


def _generic(kernel: Kernel, functional: Functional, what: str, args: tuple[Tensor, ...], order: int) -> Tensor:
    if isinstance(functional, GradientFunctional):
        kd = kernel_derivatives
        fn = {"cross": kd.grad_cross, "joint": kd.grad_joint, "point": kd.grad_point}[what]
        return fn(kernel, *args)
    b = functional.baselines
    if what == "cross":
        return path_integrals.ig_cross(kernel, args[0], b, args[1], order=order)
    if what == "joint":
        return path_integrals.ig_joint(kernel, args[0], b, args[1], order=order)
    return path_integrals.ig_point(kernel, args[0], b, order=order)


# --------------------------------------------------------------------------- closed forms
def _project(kernel: Kernel, functional: Functional, args: tuple[Tensor, ...]):
    """Restrict inputs (and baselines) to the kernel's active dimensions."""
    ad = kernel.active_dims
    if ad is None:
        return functional, args, None
    args = tuple(a.index_select(-1, ad) for a in args)
    if isinstance(functional, IntegratedGradientFunctional):
        functional = IntegratedGradientFunctional(functional.baselines.index_select(-1, ad))
    return functional, args, ad


def _scatter(res: Tensor, what: str, ad: Tensor | None, dims: int) -> Tensor:
    """Embed results over the active dimensions into all ``dims`` features (zeros elsewhere)."""
    if ad is None:
        return res
    if what == "cross":  # (..., m, Da, n)
        out = res.new_zeros(*res.shape[:-2], dims, res.size(-1))
        out[..., ad, :] = res
        return out
    if what == "point":  # (..., m, Da, Da)
        out = res.new_zeros(*res.shape[:-2], dims, dims)
        out[..., ad.unsqueeze(-1), ad] = res
        return out
    # joint (..., m1, Da, m2, Da)
    out = res.new_zeros(*res.shape[:-3], dims, res.size(-2), dims)
    out[..., ad, :, :] = _scatter_last(res, ad, dims)
    return out


def _scatter_last(res: Tensor, ad: Tensor, dims: int) -> Tensor:
    out = res.new_zeros(*res.shape[:-1], dims)
    out[..., ad] = res
    return out


def _closed_form(kernel: Kernel, functional: Functional, what: str, args: tuple[Tensor, ...]) -> Tensor:
    dims = args[0].size(-1)
    functional, args, ad = _project(kernel, functional, args)
    if isinstance(kernel, RBFKernel):
        res = _rbf(kernel, functional, what, args)
    elif isinstance(kernel, LinearKernel):
        res = _linear(kernel, functional, what, args)
    else:
        res = _rff(kernel, functional, what, args)
    return _scatter(res, what, ad, dims)


def _rbf(kernel: RBFKernel, functional: Functional, what: str, args: tuple[Tensor, ...]) -> Tensor:
    ell = kernel.lengthscale  # (*batch, 1, D or 1)
    dims = args[0].size(-1)
    ell = ell.expand(*ell.shape[:-1], dims)
    if isinstance(functional, GradientFunctional):
        fn = {"cross": rbf.rbf_grad_cross, "joint": rbf.rbf_grad_joint, "point": rbf.rbf_grad_point}[what]
        return fn(*args, ell)
    b = functional.baselines
    if what == "cross":
        return rbf.rbf_ig_cross(args[0], b, args[1], ell)
    if what == "joint":
        return rbf.rbf_ig_joint(args[0], b, args[1], ell)
    return rbf.rbf_ig_point(args[0], b, ell)


def _linear_variance(kernel: LinearKernel, dims: int) -> Tensor:
    v = kernel.variance  # (*batch, 1, 1) or (*batch, 1, D)
    return v.expand(*v.shape[:-1], dims).squeeze(-2)  # (*batch, D)


def _mean_delta(x: Tensor, functional: IntegratedGradientFunctional) -> tuple[Tensor, Tensor]:
    """Per-baseline path displacements Δ = x − b, ``(k, *batch, m, D)``, and the baselines."""
    b = functional.baselines.to(x)
    delta = x.unsqueeze(0) - b.view(b.size(0), *([1] * (x.dim() - 1)), b.size(-1))
    return delta, b


def _linear(kernel: LinearKernel, functional: Functional, what: str, args: tuple[Tensor, ...]) -> Tensor:
    # k(x, x') = Σ_d v_d x_d x'_d: ∂_i k(x, x') = v_i x'_i and ∂_i ∂'_j k = v_i δ_ij; IG_i multiplies by Δ_i
    x = args[0]
    dims = x.size(-1)
    v = _linear_variance(kernel, dims)
    if isinstance(functional, GradientFunctional):
        scale = v.unsqueeze(-2).expand(*v.shape[:-1], x.size(-2), dims)  # (*batch, m, D)
    else:
        # linear in Δ: the mean over baselines is taken first (the baseline axis must not meet a kernel batch axis)
        delta, _ = _mean_delta(x, functional)
        scale = v.unsqueeze(-2) * delta.mean(0)  # (*batch, m, D)
    if what == "cross":
        X = args[1]
        return scale.unsqueeze(-1) * X.mT.unsqueeze(-3)  # (*batch, m, D, n)
    if what == "point":
        if isinstance(functional, GradientFunctional):
            return torch.diag_embed(scale)
        # mean over baseline pairs of Δ_i Δ'_i v_i δ_ij: v_i · mean_r Δ_i · mean_r' Δ'_i
        d_mean = delta.mean(0)
        return torch.diag_embed(v.unsqueeze(-2) * d_mean * d_mean)
    # joint
    x2 = args[1]
    if isinstance(functional, GradientFunctional):
        s1 = v.unsqueeze(-2).expand(*v.shape[:-1], x.size(-2), dims)
        s2 = torch.ones_like(x2)
    else:
        s1 = v.unsqueeze(-2) * delta.mean(0)
        s2 = _mean_delta(x2, functional)[0].mean(0)
    eye = torch.eye(dims, dtype=x.dtype, device=x.device)
    return torch.einsum("...pi,ij,...qj->...piqj", s1, eye, s2)


def _rff_features(kernel: RFFKernel, functional: Functional | None, x: Tensor) -> Tensor:
    r"""Features whose inner products give the derived covariances, ``(*batch, m, D, 2S)`` (``(*batch, m, 2S)`` for f).

    With :math:`\mathbf u = \mathbf W^\top (\mathbf x / \boldsymbol\ell)` and
    :math:`\boldsymbol\phi(\mathbf x) = [\cos \mathbf u, \sin \mathbf u]/\sqrt S`:
    :math:`\partial_i \boldsymbol\phi = [-\sin\mathbf u, \cos\mathbf u] \odot \mathbf w_i / (\ell_i\sqrt S)`, and along
    the path :math:`\mathbf u(t) = \mathbf u_0 + t\boldsymbol\beta`,
    :math:`\int_0^1 [-\sin, \cos](\mathbf u(t))\,dt = [-\sin, \cos](\mathbf u_0 + \boldsymbol\beta/2)
    \operatorname{sinc}(\boldsymbol\beta/2)` (exact at :math:`\boldsymbol\beta = 0`).
    """
    dims = x.size(-1)
    if not hasattr(kernel, "randn_weights"):
        kernel._init_weights(dims, kernel.num_samples)
    num_samples = kernel.num_samples
    omega = kernel.randn_weights / kernel.lengthscale.transpose(-1, -2)  # (*batch, D, S)
    norm = math.sqrt(num_samples)
    if functional is None:
        u = x @ omega
        return torch.cat([torch.cos(u), torch.sin(u)], dim=-1) / norm
    if isinstance(functional, GradientFunctional):
        u = (x @ omega).unsqueeze(-2)  # (*batch, m, 1, S)
        w = omega.unsqueeze(-3)  # (*batch, 1, D, S)
        return torch.cat([-torch.sin(u) * w, torch.cos(u) * w], dim=-1) / norm
    delta, b = _mean_delta(x, functional)  # (k, *batch, m, D)
    u0 = b.view(b.size(0), *([1] * (x.dim() - 2)), 1, dims) @ omega  # (k, *batch, 1, S)
    beta = delta @ omega  # (k, *batch, m, S)
    mid = (u0 + 0.5 * beta).unsqueeze(-2)
    sinc = torch.sinc(beta / (2 * math.pi)).unsqueeze(-2)  # torch.sinc(x) = sin(πx)/(πx)
    w = omega.unsqueeze(-3) * delta.unsqueeze(-1)  # (k, *batch, m, D, S)
    feats = torch.cat([-torch.sin(mid) * sinc * w, torch.cos(mid) * sinc * w], dim=-1) / norm
    return feats.mean(0)


def _rff(kernel: RFFKernel, functional: Functional, what: str, args: tuple[Tensor, ...]) -> Tensor:
    f1 = _rff_features(kernel, functional, args[0])  # (*batch, m, D, 2S)
    if what == "cross":
        phi = _rff_features(kernel, None, args[1])  # (*batch, n, 2S)
        return f1 @ phi.mT.unsqueeze(-3)
    if what == "point":
        return f1 @ f1.mT
    f2 = _rff_features(kernel, functional, args[1])  # (*batch, m2, D, 2S)
    return torch.einsum("...pis,...qjs->...piqj", f1, f2)


# --------------------------------------------------------------------------- means
def functional_mean(mean: Mean, functional: Functional, x: Tensor, order: int = DEFAULT_ORDER) -> Tensor:
    r""":math:`\mathcal L_i m(\mathbf x)` for the prior mean :math:`m`, ``(*batch, m, D)``.

    Exact for ``ZeroMean`` and ``ConstantMean`` (zero) and ``LinearMean`` (:math:`w_i`, or
    :math:`\Delta_i w_i` averaged over baselines); other differentiable means by autograd and
    Gauss–Legendre quadrature of order ``order``.
    """
    if type(mean) in (ZeroMean, ConstantMean):
        batch = torch.broadcast_shapes(x.shape[:-2], _mean_batch(mean))
        return x.new_zeros(*batch, *x.shape[-2:])
    if type(mean) is LinearMean:
        w = mean.weights.squeeze(-1)  # (*batch, D)
        if isinstance(functional, GradientFunctional):
            return w.unsqueeze(-2).expand(*torch.broadcast_shapes(w.shape[:-1], x.shape[:-2]), *x.shape[-2:])
        delta, _ = _mean_delta(x, functional)
        return delta.mean(0) * w.unsqueeze(-2)  # linear in Δ (the baseline axis must not meet a mean batch axis)
    return _generic_mean(mean, functional, x, order)


def _mean_batch(mean: Mean) -> torch.Size:
    if isinstance(mean, ConstantMean):
        return mean.constant.shape
    return torch.Size()


def _mean_grad(mean: Mean, x: Tensor) -> Tensor:
    r""":math:`\nabla m(\mathbf x)` per point and per batch member of a (possibly batched) mean, ``(*batch, m, D)``.

    The inputs are first expanded to the batch shape of the mean's output, so that the gradient of the summed output
    with respect to a batch member's copy of the points is that member's gradient alone (with unbatched points the
    sum would add up every member's gradient).
    """
    with torch.no_grad():
        mean_batch = mean(x[..., :1, :].detach()).shape[:-1]
    batch = torch.broadcast_shapes(x.shape[:-2], mean_batch)
    with torch.enable_grad():
        xg = x.detach().expand(*batch, *x.shape[-2:]).clone().requires_grad_(True)
        out = mean(xg)
        (g,) = torch.autograd.grad(out.sum(), xg)
    return g


def _generic_mean(mean: Mean, functional: Functional, x: Tensor, order: int) -> Tensor:
    if isinstance(functional, GradientFunctional):
        return _mean_grad(mean, x)
    nodes, weights = gauss_legendre(order, x)
    delta, b = _mean_delta(x, functional)  # (k, …, m, D)
    total = None
    for r in range(delta.size(0)):  # one baseline at a time: its axis must not meet the mean's batch axes
        path = None
        for t, w in zip(nodes.tolist(), weights.tolist(), strict=True):
            g = w * _mean_grad(mean, b[r] + t * delta[r])
            path = g if path is None else path + g
        term = path * delta[r]
        total = term if total is None else total + term
    return total / delta.size(0)
