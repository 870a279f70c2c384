#!/usr/bin/env python3
r"""Closed-form covariances of gradient and integrated-gradient functionals of an RBF (ARD) GP.

The kernel is the unit-outputscale RBF kernel with (ARD) lengthscales :math:`\boldsymbol\ell`,

.. math::

    k(\mathbf x, \mathbf x') = \exp\Big(-\tfrac12 \sum_d (x_d - x'_d)^2 / \ell_d^2\Big),

(a :class:`~gpytorch.kernels.ScaleKernel` around it only multiplies everything by its outputscale). For a GP
:math:`f` the gradient :math:`\partial_i f(\mathbf x)` and the (expected) integrated gradient

.. math::

    \mathrm{IG}_i f(\mathbf x) = \frac1k \sum_{r=1}^k \Delta^{(r)}_i \int_0^1
    \partial_i f\big(\mathbf b^{(r)} + t \boldsymbol\Delta^{(r)}\big)\, dt,
    \qquad \boldsymbol\Delta^{(r)} = \mathbf x - \mathbf b^{(r)},

are linear functionals, so they are jointly Gaussian with :math:`f`. This module gives their covariances with
:math:`f` and with each other.

**Scaled coordinates.** Everything is computed in units of the lengthscales, :math:`\boldsymbol\delta =
\boldsymbol\Delta / \boldsymbol\ell` etc. Because :math:`\Delta_i \partial_{x_i} = \delta_i \partial_{z_i}` with
:math:`z = x/\ell`, the IG covariances carry no explicit :math:`\ell` factors in these units.

**Segment moments.** Along a straight path :math:`\mathbf u(t) = \mathbf b + t \boldsymbol\Delta` the kernel
against a point :math:`\mathbf X` is :math:`e^{-q(t)}`, :math:`q(t) = \tfrac12 (A t^2 + 2 B t + C)` with
:math:`A = \|\boldsymbol\delta\|^2`, :math:`B = \boldsymbol\delta \cdot (\mathbf b - \mathbf X)/\boldsymbol\ell`,
:math:`C = \|(\mathbf b - \mathbf X)/\boldsymbol\ell\|^2` (so :math:`AC \ge B^2`). All IG covariances reduce to
the moments :math:`I_p = \int_0^1 t^p e^{-q(t)}\, dt`, :math:`p = 0, 1, 2`, evaluated stably by
:func:`_segment_moments` (scaled-complementary-error-function forms for long segments, a Gauss–Legendre rule for
short ones). IG–IG covariances integrate these moments once more over the other path (composite Gauss–Legendre
on the part of the path where the integrand is not negligible, with panels sized from the path length,
:func:`_pair_plan`, :func:`_pair_moments`), in coordinates centred where the two paths come closest and split
along/across the inner path so that nothing large cancels (:func:`_ig_pair_blocks`); the variance case of a path
with itself has the exact one-dimensional closed form of :func:`_self_moments`. For :math:`D = 1` the IG is
:math:`f(\mathbf x) - \bar f(\mathbf b)` and paths longer than a lengthscale use that (kernel differences) directly.

Accuracy (float64, against mpmath and brute-force quadrature; see
``tests/attribution/test_attribution_rbf.py``): segment moments to ~1e-15 relative for short segments and ~1e-12
for long ones (~1e-10 when :math:`e^{-q}` is
:math:`< 10^{-170}`); IG–IG covariances converged to ~1e-14 relative to their largest entry for paths up to
:math:`\|\boldsymbol\Delta/\boldsymbol\ell\| = 100`.

All functions are batched (leading batch dimensions broadcast between the inputs and the lengthscales), work for
any floating dtype and device, and are differentiable with respect to the inputs and the lengthscales (the
gradients stay finite at :math:`\mathbf x = \mathbf b`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._rbf_moments import (  # _self_moments, _switch_h: their import path before the split
    _chunks,
    _ig_pair_blocks,
    _segment_moments,
    _self_moments,  # noqa: F401
    _switch_h,  # noqa: F401
)

__all__ = [
    "rbf_grad_cross",
    "rbf_grad_joint",
    "rbf_grad_point",
    "rbf_ig_cross",
    "rbf_ig_joint",
    "rbf_ig_point",
]


# =============================================================================================
# input handling
# =============================================================================================
def _prep_ell(ell: Tensor, dims: int, like: Tensor) -> Tensor:
    r"""Lengthscales as ``(*batch, 1, D)`` (accepts ``()``, ``(D,)``, ``(1,)``, ``(*batch, 1, D or 1)``)."""
    ell = torch.as_tensor(ell, dtype=like.dtype, device=like.device)
    if ell.dim() == 0:
        ell = ell.reshape(1, 1)
    elif ell.dim() == 1:
        ell = ell.unsqueeze(0)
    if ell.size(-2) != 1 or ell.size(-1) not in (1, dims):
        raise ValueError(f"lengthscale must be (D,) or (*batch, 1, D or 1); got {tuple(ell.shape)} for D = {dims}.")
    return ell.expand(*ell.shape[:-1], dims)


def _prep_baselines(baselines: Tensor, dims: int, like: Tensor) -> Tensor:
    b = torch.as_tensor(baselines, dtype=like.dtype, device=like.device)
    if b.dim() == 1:
        b = b.unsqueeze(0)
    if b.dim() != 2 or b.size(-1) != dims:
        raise ValueError(f"baselines must be (D,) or (k, D) with D = {dims}; got {tuple(b.shape)}.")
    return b


def _broadcast(*pairs: tuple[Tensor, int]) -> tuple[tuple[int, ...], list[Tensor]]:
    """Broadcast the batch dimensions (all but the last ``nd``) of each ``(tensor, nd)``."""
    batch = torch.broadcast_shapes(*(t.shape[: t.dim() - nd] for t, nd in pairs))
    return batch, [t.expand(*batch, *t.shape[t.dim() - nd :]) for t, nd in pairs]


# =============================================================================================
# gradients
# =============================================================================================
def rbf_grad_cross(x: Tensor, X: Tensor, ell: Tensor) -> Tensor:
    r"""Covariance of the gradient at ``x`` with the function at ``X``.

    .. math::

        \mathrm{Cov}\big(\partial_i f(\mathbf x_p), f(\mathbf X_j)\big)
        = \frac{\partial k(\mathbf x_p, \mathbf X_j)}{\partial x_{i}}
        = -\frac{x_{pi} - X_{ji}}{\ell_i^2}\, k(\mathbf x_p, \mathbf X_j).

    :param x: ``(*batch, m, D)``.
    :param X: ``(*batch, n, D)``.
    :param ell: lengthscales, ``(D,)`` or ``(*batch, 1, D or 1)``.
    :return: ``(*batch, m, D, n)``.
    """
    dims = x.size(-1)
    ell = _prep_ell(ell, dims, x)
    _, (x, X, ell) = _broadcast((x, 2), (X, 2), (ell, 2))
    u = (x.unsqueeze(-2) - X.unsqueeze(-3)) / ell.unsqueeze(-2)  # (*, m, n, D), scaled differences
    kern = torch.exp(-0.5 * (u * u).sum(-1))
    return (-(u / ell.unsqueeze(-2)) * kern.unsqueeze(-1)).transpose(-1, -2)


def rbf_grad_joint(x1: Tensor, x2: Tensor, ell: Tensor) -> Tensor:
    r"""Covariance of the gradients at ``x1`` and ``x2``.

    .. math::

        \mathrm{Cov}\big(\partial_i f(\mathbf x), \partial_j f(\mathbf x')\big)
        = \frac{\partial^2 k}{\partial x_i\, \partial x'_j}
        = k(\mathbf x, \mathbf x') \Big(\frac{\delta_{ij}}{\ell_i^2}
        - \frac{(x_i - x'_i)(x_j - x'_j)}{\ell_i^2 \ell_j^2}\Big).

    :return: ``(*batch, m1, D, m2, D)``.
    """
    dims = x1.size(-1)
    ell = _prep_ell(ell, dims, x1)
    _, (x1, x2, ell) = _broadcast((x1, 2), (x2, 2), (ell, 2))
    inv = ell.reciprocal().unsqueeze(-2)  # (*, 1, 1, D)
    u = (x1.unsqueeze(-2) - x2.unsqueeze(-3)) * inv  # (*, m1, m2, D)
    kern = torch.exp(-0.5 * (u * u).sum(-1))[..., None, None]
    v = u * inv  # (x − x') / ℓ²
    eye = torch.diag_embed(inv * inv)  # (*, 1, 1, D, D)
    out = kern * (eye - v.unsqueeze(-1) * v.unsqueeze(-2))  # (*, m1, m2, D, D)
    return out.transpose(-3, -2)


def rbf_grad_point(x: Tensor, ell: Tensor) -> Tensor:
    r"""Per-point gradient covariance :math:`\mathrm{Cov}(\nabla f(\mathbf x_p)) = \mathrm{diag}(1/\ell^2)`.

    :return: ``(*batch, m, D, D)``.
    """
    dims = x.size(-1)
    ell = _prep_ell(ell, dims, x)
    batch, (x, ell) = _broadcast((x, 2), (ell, 2))
    diag = torch.diag_embed(ell.reciprocal() ** 2)  # (*, 1, D, D)
    return diag.expand(*batch, x.size(-2), dims, dims)


# =============================================================================================
# integrated gradients against points
# =============================================================================================
def rbf_ig_cross(x: Tensor, baselines: Tensor, X: Tensor, ell: Tensor) -> Tensor:
    r"""Covariance of the (expected) integrated gradients at ``x`` with the function at ``X``.

    For one baseline, in scaled units (:math:`\boldsymbol\delta = (\mathbf x - \mathbf b)/\boldsymbol\ell`,
    :math:`\boldsymbol\beta_j = (\mathbf b - \mathbf X_j)/\boldsymbol\ell`),

    .. math::

        \mathrm{Cov}\big(\mathrm{IG}_i f(\mathbf x), f(\mathbf X_j)\big)
        = \Delta_i \int_0^1 \frac{\partial k}{\partial u_i}(\mathbf b + t\boldsymbol\Delta, \mathbf X_j)\, dt
        = -\delta_i \big[\beta_{ji} I_0 + \delta_i I_1\big],

    with the segment moments :math:`I_{0,1}` of :func:`_segment_moments` for :math:`A = \|\boldsymbol\delta\|^2`,
    :math:`B = \boldsymbol\delta\cdot\boldsymbol\beta_j`, :math:`C = \|\boldsymbol\beta_j\|^2`. Several baselines
    are averaged (the contraction over baselines is a batched matrix product). ``x = b`` gives exact zeros.
    Summing over :math:`i` gives :math:`\frac1k\sum_r k(\mathbf x, \mathbf X_j) - k(\mathbf b^{(r)}, \mathbf X_j)`
    (completeness).

    :param x: ``(*batch, m, D)``.
    :param baselines: ``(k, D)`` (or ``(D,)``).
    :param X: ``(*batch, n, D)``.
    :param ell: lengthscales, ``(D,)`` or ``(*batch, 1, D or 1)``.
    :return: ``(*batch, m, D, n)``. Computed in chunks of points so that temporaries stay near
        ``2**22`` elements.
    """
    dims = x.size(-1)
    ell = _prep_ell(ell, dims, x)
    b = _prep_baselines(baselines, dims, x)
    _, (x, X, ell) = _broadcast((x, 2), (X, 2), (ell, 2))
    k, m, n = b.size(0), x.size(-2), X.size(-2)
    ell4 = ell.unsqueeze(-2)  # (*, 1, 1, D)
    beta = (b.unsqueeze(-2) - X.unsqueeze(-3)) / ell4  # (*, k, n, D): (b_r − X_j)/ℓ
    C = (beta * beta).sum(-1).unsqueeze(-3)  # (*, 1, k, n)
    beta0 = beta[..., 0, :, :].transpose(-1, -2).unsqueeze(-3)  # (*, 1, D, n)
    shift = (b - b[:1]) / ell if k > 1 else None  # (*, k, D): (b_r − b_0)/ℓ
    outs = []
    for sl in _chunks(m, n * max(8 * k, dims)):
        delta = (x[..., sl, :].unsqueeze(-2) - b) / ell4  # (*, mc, k, D)
        A = (delta * delta).sum(-1).unsqueeze(-1)  # (*, mc, k, 1)
        Bm = torch.einsum("...prd,...rjd->...prj", delta, beta)  # (*, mc, k, n)
        I0, I1, _ = _segment_moments(A, Bm, C)
        if dims == 1:
            outs.append(_ig_cross_1d(x[..., sl, :], b, X, ell, delta, beta, I0, I1))
            continue
        # −(1/k) Σ_r δ_ri [(β_0 + (b_r − b_0)/ℓ)_i I0 + δ_ri I1], contracting r by batched matmuls
        nd = delta * (-1.0 / k)
        res = torch.einsum("...pri,...prj->...pij", nd * delta, I1)
        if shift is not None:
            res = res + torch.einsum("...pri,...prj->...pij", nd * shift.unsqueeze(-3), I0)
        outs.append(torch.addcmul(res, torch.einsum("...pri,...prj->...pij", nd, I0), beta0))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-3)


def _ig_cross_1d(
    x: Tensor, b: Tensor, X: Tensor, ell: Tensor, delta: Tensor, beta: Tensor, I0: Tensor, I1: Tensor
) -> Tensor:
    r""":func:`rbf_ig_cross` for :math:`D = 1`, where the IG is :math:`f(x) - f(b)` itself.

    Paths at least one lengthscale long use the difference of kernels :math:`k(x, X_j) - k(b, X_j)` (accurate to
    a few ulps of the kernel values, so tiny results keep their relative accuracy, e.g. for a long path over a
    distant :math:`X_j`); shorter ones the integral :math:`-\delta(\beta_j I_0 + \delta I_1)`, which does not
    cancel as :math:`x \to b`.
    """
    integral = -delta * (beta.squeeze(-1).unsqueeze(-3) * I0 + delta * I1)  # (*, mc, k, n)
    corner = _rbf(x.unsqueeze(-2), X.unsqueeze(-3), ell.unsqueeze(-2)) - _rbf(b, X, ell).unsqueeze(-3)
    val = torch.where(delta.abs() >= 1, corner, integral)
    return val.mean(-2).unsqueeze(-2)  # (*, mc, 1, n)


def _rbf(x: Tensor, y: Tensor, ell: Tensor) -> Tensor:
    """``k(x, y)`` for ``x (..., m, D)``, ``y (..., n, D)``, ``ell (..., 1, D)``: ``(..., m, n)``."""
    u = (x.unsqueeze(-2) - y.unsqueeze(-3)) / ell.unsqueeze(-2)
    return torch.exp(-0.5 * (u * u).sum(-1))


def rbf_ig_joint(x1: Tensor, baselines: Tensor, x2: Tensor, ell: Tensor, baselines2: Tensor | None = None) -> Tensor:
    r"""Covariance of the (expected) integrated gradients at ``x1`` and at ``x2``.

    .. math::

        \mathrm{Cov}\big(\mathrm{IG}_i f(\mathbf x_p), \mathrm{IG}'_j f(\mathbf x'_q)\big)
        = \frac{1}{k k'} \sum_{r, r'} \Delta_i \Delta'_j \int_0^1\!\!\int_0^1
        \Big[\frac{\delta_{ij}}{\ell_i^2} - \frac{(a_i - a'_i)(a_j - a'_j)}{\ell_i^2\ell_j^2}\Big]
        k(\mathbf a, \mathbf a')\, ds\, dt,

    :math:`\mathbf a = \mathbf b^{(r)} + s\boldsymbol\Delta`, :math:`\mathbf a' = \mathbf b'^{(r')} +
    t\boldsymbol\Delta'`, evaluated per pair by :func:`_ig_pair_blocks`: the inner integral in closed form, the
    outer by adaptive composite Gauss–Legendre (relative accuracy ~1e-12 in float64 up to
    :math:`\|\boldsymbol\Delta/\boldsymbol\ell\| \sim 100`), and exactly (1-D closed form) where a path meets
    itself (:math:`\mathbf x_p = \mathbf x'_q` and :math:`\mathbf b^{(r)} = \mathbf b'^{(r')}`).

    :param x1: ``(*batch, m1, D)``.
    :param baselines: ``(k, D)`` baselines of ``x1``.
    :param x2: ``(*batch, m2, D)``.
    :param ell: lengthscales, ``(D,)`` or ``(*batch, 1, D or 1)``.
    :param baselines2: ``(k', D)`` baselines of ``x2`` (default: ``baselines``).
    :return: ``(*batch, m1, D, m2, D)``.
    """
    dims = x1.size(-1)
    ell = _prep_ell(ell, dims, x1)
    b1 = _prep_baselines(baselines, dims, x1)
    b2 = b1 if baselines2 is None else _prep_baselines(baselines2, dims, x1)
    _, (x1, x2, ell) = _broadcast((x1, 2), (x2, 2), (ell, 2))
    ell4 = ell.unsqueeze(-2)
    d1 = (x1.unsqueeze(-2) - b1) / ell4  # (*, m1, k1, D)
    d2 = (x2.unsqueeze(-2) - b2) / ell4  # (*, m2, k2, D)
    E = (b1.unsqueeze(-2) - b2) / ell4  # (*, k1, k2, D)
    k1, k2, m1, m2 = b1.size(0), b2.size(0), x1.size(-2), x2.size(-2)
    outs = []
    for sl in _chunks(m1, k1 * k2 * m2 * dims * (dims + 8)):
        blocks = _ig_pair_blocks(
            d1[..., sl, :, None, None, :], d2[..., None, None, :, :, :], E[..., None, :, None, :, :]
        )  # (*, mc, k1, m2, k2, D, D)
        outs.append(blocks.mean(dim=(-5, -3)).transpose(-3, -2))  # (*, mc, D, m2, D)
    return torch.cat(outs, dim=-4)


def rbf_ig_point(x: Tensor, baselines: Tensor, ell: Tensor) -> Tensor:
    r"""Per-point covariance blocks :math:`\mathrm{Cov}(\mathrm{IG} f(\mathbf x_p))` (``D × D``).

    The diagonal blocks of :func:`rbf_ig_joint` with ``x1 = x2 = x``: pairs of the same baseline use the
    exact closed form :math:`\delta_i\delta_j(\delta_{ij} K_0 - \delta_i\delta_j K_2)` (:func:`_self_moments`,
    :math:`a = \|\boldsymbol\delta\|^2`), pairs of different baselines the general two-path integral.

    :return: ``(*batch, m, D, D)``.
    """
    dims = x.size(-1)
    ell = _prep_ell(ell, dims, x)
    b = _prep_baselines(baselines, dims, x)
    _, (x, ell) = _broadcast((x, 2), (ell, 2))
    ell4 = ell.unsqueeze(-2)
    k, m = b.size(0), x.size(-2)
    d = (x.unsqueeze(-2) - b) / ell4  # (*, m, k, D)
    E = (b.unsqueeze(-2) - b) / ell4  # (*, k, k, D)
    outs = []
    for sl in _chunks(m, k * k * dims * (dims + 8)):
        dc = d[..., sl, :, :]
        blocks = _ig_pair_blocks(dc.unsqueeze(-2), dc.unsqueeze(-3), E.unsqueeze(-4))  # (*, mc, k, k, D, D)
        outs.append(blocks.mean(dim=(-4, -3)))
    return torch.cat(outs, dim=-3)
