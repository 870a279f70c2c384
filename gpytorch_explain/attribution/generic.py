#!/usr/bin/env python3
r"""Gradient and integrated-gradient covariances for any twice-differentiable GPyTorch kernel.

For :math:`f \sim \mathcal{GP}(0, k)` the gradient and the (expected) integrated gradient

.. math::

    \partial_i f(\mathbf x), \qquad
    \mathrm{IG}_i f(\mathbf x) = \frac1k \sum_{r=1}^{k} \Delta^{(r)}_i \int_0^1
    \partial_i f\big(\mathbf b^{(r)} + t\boldsymbol\Delta^{(r)}\big)\,dt,
    \qquad \boldsymbol\Delta^{(r)} = \mathbf x - \mathbf b^{(r)},

are linear functionals of :math:`f`, so their covariances are derived kernels:

.. math::

    \operatorname{Cov}(\partial_i f(\mathbf x), f(\mathbf X)) = \partial_i k(\mathbf x, \mathbf X), \qquad
    \operatorname{Cov}(\partial_i f(\mathbf x), \partial_j f(\mathbf x')) = \partial_i \partial'_j k(\mathbf x,
    \mathbf x'),

    \operatorname{Cov}(\mathrm{IG}_i f(\mathbf x), f(\mathbf X)) = \frac1k\sum_r \Delta^{(r)}_i \int_0^1
    \partial_i k(\mathbf a_r(t), \mathbf X)\,dt, \qquad \mathbf a_r(t) = \mathbf b^{(r)} + t\boldsymbol\Delta^{(r)},

    \operatorname{Cov}(\mathrm{IG}_i f(\mathbf x), \mathrm{IG}_j f(\mathbf x')) = \frac{1}{k k'}\sum_{r,s}
    \Delta^{(r)}_i \Delta'^{(s)}_j \int_0^1\!\!\int_0^1 \partial_i\partial'_j k(\mathbf a_r(t),
    \mathbf a'_s(u))\,dt\,du,

with :math:`\partial_i` acting on the first and :math:`\partial'_j` on the second argument. This module computes
them for any kernel built from

* **closed-form leaves** -- ``RBFKernel``, ``RQKernel``, ``MaternKernel`` (:math:`\nu = 3/2, 5/2`),
  ``PeriodicKernel``, ``LinearKernel``, ``ConstantKernel`` (isotropic or ARD, any ``active_dims``, batched);
* **structure** -- ``ScaleKernel``, sums (``AdditiveKernel``, ``k1 + k2``; linearity) and ``ProductKernel``
  (``k1 * k2``; product rule
  :math:`\partial_i\partial'_j(k_1k_2) = (\partial_i\partial'_j k_1)k_2 + \partial_i k_1\,\partial'_j k_2
  + \partial'_j k_1\,\partial_i k_2 + k_1\,\partial_i\partial'_j k_2`);
* **any other kernel** (user-defined ``Kernel`` subclasses, ...) -- plain torch autograd of the kernel's
  ``__call__``: all :math:`D` (or :math:`D^2`) directional derivatives of a whole block at once, by shifting all
  first (second) arguments by a common vector :math:`\mathbf s` (:math:`\mathbf t`) and differentiating
  :math:`\sum_{pq} v_{pq} k(\mathbf x_p + \mathbf s, \mathbf x'_q + \mathbf t)` once more with respect to the
  dummy weights :math:`v` (the "double-backward" trick). Such kernels are *assumed* twice continuously
  differentiable, including at coincident inputs :math:`\mathbf x = \mathbf x'`, and smooth along the paths
  (no kinks); non-finite autograd results raise :class:`KernelNotDifferentiableError`.

**Why closed forms for the built-in stationary kernels.** GPyTorch evaluates them through
:math:`r^2 = \mathrm{clamp}(\|\mathbf x\|^2 + \|\mathbf x'\|^2 - 2\mathbf x\cdot\mathbf x', 0)` or
:math:`r = \mathrm{cdist}(\mathbf x, \mathbf x')`: at :math:`\mathbf x = \mathbf x'` the clamp randomly zeroes the
gradient (wrong second derivatives for RBF/RQ) and ``cdist`` has no double backward (Matérn, periodic). The leaves
are therefore differentiated analytically. For a radial leaf :math:`k = g(s)`, :math:`s = \|\mathbf z\|^2`,
:math:`\mathbf z = (\mathbf x - \mathbf x')/\boldsymbol\ell`:

.. math::

    \partial_i k = \gamma\,\frac{z_i}{\ell_i}, \qquad \partial'_j k = -\gamma\,\frac{z_j}{\ell_j}, \qquad
    \partial_i\partial'_j k = -\frac{\omega\, z_i z_j + \gamma\,\delta_{ij}}{\ell_i \ell_j}, \qquad
    \gamma = 2g'(s),\ \omega = 4g''(s),

* RBF: :math:`k = e^{-s/2}`, :math:`\gamma = -e^{-s/2}`, :math:`\omega = e^{-s/2}`;
* RQ: :math:`k = w^{-\alpha}`, :math:`\gamma = -w^{-\alpha-1}`,
  :math:`\omega = \tfrac{\alpha+1}{\alpha} w^{-\alpha-2}`;
* Matérn-3/2: :math:`k = (1+\sqrt3 r)e^{-\sqrt3 r}`, :math:`\gamma = -3e^{-\sqrt3 r}`,
  :math:`\omega = 3\sqrt3\, e^{-\sqrt3 r}/r`;
* Matérn-5/2: :math:`k = (1+\sqrt5 r+\tfrac53 r^2)e^{-\sqrt5 r}`,
  :math:`\gamma = -\tfrac53(1+\sqrt5 r)e^{-\sqrt5 r}`, :math:`\omega = \tfrac{25}{3}e^{-\sqrt5 r}`

(:math:`r = \sqrt s`, :math:`w = 1 + s/(2\alpha)`). All are finite at :math:`r = 0` except the Matérn-3/2
:math:`\omega`, whose product :math:`\omega z_i z_j = 3\sqrt3 e^{-\sqrt3 r}\, r\, \hat z_i \hat z_j \to 0`; so
:math:`\partial_i\partial'_j k(\mathbf x, \mathbf x) = -\gamma(0)\,\delta_{ij}/\ell_i^2`, e.g.
:math:`\tfrac53\delta_{ij}/\ell_i^2` for Matérn-5/2 and :math:`3\delta_{ij}/\ell_i^2` for Matérn-3/2. Matérn-1/2
(:math:`e^{-r}`, not differentiable at :math:`r = 0`) and kernels of discrete inputs raise
:class:`KernelNotDifferentiableError`.

**Quadrature and kinks.** Path integrals use Gauss--Legendre (GL) rules of ``order`` nodes per panel (per
dimension in 2-D). Matérn kernels are only finitely smooth at :math:`\mathbf x = \mathbf x'`
(:math:`\partial_i\partial'_j k` contains :math:`e^{-\sqrt5 r} \approx 1 - \sqrt5 r`), so an integrand has a kink
wherever the two arguments meet, restricted to the Matérn leaf's active dimensions :math:`S`:

* ``ig_cross``: where a path passes through a data point (:math:`P_S(\mathbf a(t) - \mathbf X_j) = 0` at an
  interior :math:`t^*`) the GL rule is split into panels at :math:`t^*`;
* ``ig_joint`` / ``ig_point``: the singular set of :math:`P_S(\mathbf a(t) - \mathbf a'(u)) = 0` in the unit
  square is a point (cone singularity, e.g. the corner :math:`(0, 0)` for every pair of paths sharing a baseline,
  or :math:`(1, 1)` for two baselines of the same point) or a line (parallel paths: the diagonal :math:`t = u` for
  a path with itself, :math:`t = cu` for :math:`\mathbf x' - \mathbf b \parallel \mathbf x - \mathbf b`). The
  square is split along the diagonal through a singular corner into two triangles, each mapped to the square by a
  Duffy (collapsed) transform :math:`(t, u) = (\xi, \xi\eta)` resp. :math:`(\xi\eta, \xi)` with Jacobian
  :math:`\xi`: on each triangle the distance becomes :math:`r = \xi\,\rho(\eta)` with smooth :math:`\rho`, so the
  integrand is smooth and tensor GL converges exponentially (plain tensor GL only algebraically: for a path with
  itself, Matérn-5/2, errors :math:`9\cdot10^{-3}, 7\cdot10^{-4}, 5\cdot10^{-5}` at orders 8, 16, 32 against
  :math:`4\cdot10^{-11}, 4\cdot10^{-16}, 10^{-15}` with the split). Kink lines through that corner become lines
  :math:`\eta = \eta^*` where the :math:`\eta` range is split. Remaining configurations (paths crossing in their
  interiors, overlapping collinear paths with different baselines, ...) are subdivided exactly into convex
  polygons along the kink lines, fanned into triangles around singular points and integrated with the same
  collapsed rule (a per-pair Python loop; such pairs are rare).

Near-misses are smooth but nearly singular (a feature of width :math:`w` = closest distance / path length, in
lengthscale units) and are refined too when :math:`w <` ``_NEAR``: panels split at the closest approach and
graded geometrically around it (:math:`\pm w 4^j`) in ``ig_cross``; in 2-D, nearly parallel or nearly crossing
paths are triangulated around their closest point with graded :math:`\xi`/:math:`\eta` panels. Other smooth
kernels (RBF, RQ, periodic, linear, user kernels) use plain GL (tensor GL in 2-D).

Additive kernels are integrated term by term, each with the kinks of its own Matérn leaves. Error estimates
(``return_error=True``) are :math:`|I_N - I_{\lfloor N/2\rfloor}|` on the same subdivision: an upper-bound-ish
indicator, pessimistic when converged (the order-:math:`N` result is usually far more accurate) and large when
``order`` is too low.

**Fast paths.** For a (scaled) radial leaf the integrals need only scalar profiles at the nodes:
:math:`\sum_q w_q\partial_i k(\mathbf a(t_q), \mathbf X_j) = \frac{\sigma^2}{\ell_i^2}[(b_i - X_{ji})\sum_q
w_q\gamma_q + \Delta_i\sum_q w_q t_q\gamma_q]` (distances by ``cdist`` on exact differences) and
:math:`\sum_n w_n\partial_i\partial'_j k = -\frac{\sigma^2}{\ell_i\ell_j}[\sum_n w_n\omega_n z_{ni}z_{nj} +
\delta_{ij}\sum_n w_n\gamma_n]`; everything else materialises derivative blocks.

**Gradients with respect to hyperparameters.** Closed-form paths are differentiable (leave grad mode on), but
then every block's graph is kept: call under ``torch.no_grad()`` for large problems. Autograd leaves return
detached results.

**Shapes.** ``x`` ``(*batch, m, D)``, ``X`` ``(*batch, n, D)``, ``baselines`` ``(k, D)`` (or ``(D,)``); batch
dimensions broadcast with each other and with the kernel's ``batch_shape``. Work is done in blocks of about
``block_size`` elements, vectorised over whole blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import gpytorch
import numpy as np
import torch
from gpytorch.kernels import (
    AdditiveKernel,
    ConstantKernel,
    Kernel,
    LinearKernel,
    MaternKernel,
    PeriodicKernel,
    ProductKernel,
    RBFKernel,
    RQKernel,
    ScaleKernel,
)
from linear_operator import to_dense
from torch import Tensor

from ..errors import KernelNotDifferentiableError  # noqa: F401 (re-exported here for old imports)
from .functionals import IntegratedGradient, check_inputs

__all__ = [
    "KernelNotDifferentiableError",
    "grad_cross",
    "grad_joint",
    "grad_point",
    "ig_cross",
    "ig_joint",
    "ig_point",
    "kernel_derivatives",
]

#: Default Gauss–Legendre order of the 1-D path integrals (``ig_cross``).
DEFAULT_ORDER_1D = 32
#: Default Gauss–Legendre order per dimension of the 2-D path integrals (``ig_joint``, ``ig_point``).
DEFAULT_ORDER_2D = 24
#: Default element budget of the largest temporaries of one block.
DEFAULT_BLOCK = 1 << 23
#: Relative distance below which paths (or a path and a point) are treated as intersecting.
DEFAULT_KINK_TOL = 1e-7
#: Near-misses closer than this fraction of the path length (lengthscale units) get graded panels.
_NEAR = 0.2
#: Maximum number of geometric grading steps on each side of a near-miss.
_GRADE_STEPS = 12

_RADIAL = (RBFKernel, RQKernel, MaternKernel)
_CLOSED = (RBFKernel, RQKernel, MaternKernel, PeriodicKernel, LinearKernel, ConstantKernel)
_STRUCT = (ScaleKernel, AdditiveKernel, ProductKernel)
_SQRT3, _SQRT5 = math.sqrt(3.0), math.sqrt(5.0)
#: Duffy corners in order of preference: (t, u) = (0, 0), (1, 1), (0, 1), (1, 0).
_CORNERS = ((0.0, 0.0), (1.0, 1.0), (0.0, 1.0), (1.0, 0.0))


# =====================================================================================================================
# Gauss–Legendre rules
# =====================================================================================================================
@lru_cache(maxsize=64)
def _gl_np(order: int) -> tuple[np.ndarray, np.ndarray]:
    nodes, weights = np.polynomial.legendre.leggauss(order)
    return (nodes + 1.0) / 2.0, weights / 2.0


def _gl(order: int, like: Tensor) -> tuple[Tensor, Tensor]:
    r"""Gauss–Legendre nodes and weights on :math:`[0, 1]` (:math:`\sum_q w_q = 1`)."""
    nodes, weights = _gl_np(int(order))
    return (
        torch.as_tensor(nodes, dtype=like.dtype, device=like.device),
        torch.as_tensor(weights, dtype=like.dtype, device=like.device),
    )


def _tol(kink_tol: float, like: Tensor) -> float:
    """Kink tolerance, at least a few ulps of the working dtype."""
    return max(float(kink_tol), 16.0 * torch.finfo(like.dtype).eps)


def _orders(order: int, return_error: bool) -> tuple[int, ...]:
    if int(order) != order or order < 1:
        raise ValueError(f"order must be a positive integer, got {order!r}.")
    order = int(order)
    return (order, max(1, order // 2)) if return_error else (order,)


# =====================================================================================================================
# Derivative blocks
# =====================================================================================================================
@dataclass
class _Derivs:
    r"""Kernel values and derivatives on a broadcast block of point pairs ``(*S)``.

    ``k`` :math:`k(\mathbf x_1, \mathbf x_2)` ``(*S)``; ``g1`` :math:`\partial k/\partial x_{1,i}` ``(*S, D)``;
    ``g2`` :math:`\partial k/\partial x_{2,j}` ``(*S, D)``; ``h`` :math:`\partial^2 k/\partial x_{1,i}\partial
    x_{2,j}` ``(*S, D, D)``. Entries not requested are ``None``.
    """

    k: Tensor
    g1: Tensor | None = None
    g2: Tensor | None = None
    h: Tensor | None = None

    def scale(self, c: Tensor) -> _Derivs:
        """Multiply by a parameter ``c`` broadcastable with ``k``."""
        return _Derivs(
            self.k * c,
            None if self.g1 is None else self.g1 * c.unsqueeze(-1),
            None if self.g2 is None else self.g2 * c.unsqueeze(-1),
            None if self.h is None else self.h * c.unsqueeze(-1).unsqueeze(-1),
        )

    def __add__(self, other: _Derivs) -> _Derivs:
        def add(a: Tensor | None, b: Tensor | None) -> Tensor | None:
            return None if a is None or b is None else a + b

        return _Derivs(self.k + other.k, add(self.g1, other.g1), add(self.g2, other.g2), add(self.h, other.h))

    def __mul__(self, other: _Derivs) -> _Derivs:
        """Product rule."""
        a, b = self, other
        k = a.k * b.k
        g1 = g2 = h = None
        if a.g1 is not None and b.g1 is not None:
            g1 = a.g1 * b.k.unsqueeze(-1) + a.k.unsqueeze(-1) * b.g1
        if a.g2 is not None and b.g2 is not None:
            g2 = a.g2 * b.k.unsqueeze(-1) + a.k.unsqueeze(-1) * b.g2
        if a.h is not None and b.h is not None:
            h = (
                a.h * b.k[..., None, None]
                + a.k[..., None, None] * b.h
                + a.g1.unsqueeze(-1) * b.g2.unsqueeze(-2)
                + b.g1.unsqueeze(-1) * a.g2.unsqueeze(-2)
            )
        return _Derivs(k, g1, g2, h)

    def embed(self, idx: Tensor | None, dims: int) -> _Derivs:
        """Scatter derivatives with respect to the columns ``idx`` into all ``dims`` input columns."""
        if idx is None:
            return self

        def vec(g: Tensor | None) -> Tensor | None:
            if g is None:
                return None
            return g.new_zeros(*g.shape[:-1], dims).index_add(-1, idx, g)

        h = self.h
        if h is not None:
            h = h.new_zeros(*h.shape[:-2], dims, h.size(-1)).index_add(-2, idx, h)
            h = h.new_zeros(*h.shape[:-1], dims).index_add(-1, idx, h)
        return _Derivs(self.k, vec(self.g1), vec(self.g2), h)


def _row(p: Tensor, npd: int) -> Tensor:
    """A ``(*kb, 1, c)`` kernel parameter as ``(*kb, 1, ..., 1, c)`` with ``npd`` point dimensions."""
    p = p[..., 0, :]
    return p.reshape(*p.shape[:-1], *([1] * npd), p.size(-1))


def _scalar(p: Tensor, npd: int) -> Tensor:
    """A ``(*kb)`` kernel parameter as ``(*kb, 1, ..., 1)`` with ``npd`` point dimensions."""
    return p.reshape(*p.shape, *([1] * npd))


def _safe_r(s: Tensor) -> tuple[Tensor, Tensor]:
    """:math:`r = \\sqrt s` and a denominator-safe copy (1 where :math:`s = 0`); finite gradients at 0."""
    pos = s > 0
    root = torch.where(pos, s, torch.ones_like(s)).sqrt()
    return torch.where(pos, root, torch.zeros_like(s)), root


def _radial_profile(
    kernel: Kernel, s: Tensor, npd: int, need: int, r: Tensor | None = None, value: bool = True
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    r""":math:`(k, \gamma, \omega)` of a radial leaf at squared scaled distances ``s`` (see the module docs).

    ``need`` < 2 skips :math:`\omega`, ``value=False`` skips :math:`k`; ``r`` (:math:`\sqrt s`) may be given.
    """
    if isinstance(kernel, RBFKernel):
        e = torch.exp(-0.5 * s)
        return e, -e, e
    if isinstance(kernel, RQKernel):
        alpha = _scalar(kernel.alpha[..., 0], npd)
        w = 1.0 + s / (2.0 * alpha)
        k = w.pow(-alpha)
        if need == 0:
            return k, None, None
        gamma = -k / w
        return k, gamma, -gamma / w * (alpha + 1.0) / alpha if need >= 2 else None
    if r is None:
        r, _ = _safe_r(s)
    if kernel.nu == 1.5:
        e = torch.exp(-_SQRT3 * r)
        k = (1.0 + _SQRT3 * r) * e if value else None
        omega = None
        if need >= 2:
            omega = torch.where(
                r > 0, 3.0 * _SQRT3 * e / torch.where(r > 0, r, torch.ones_like(r)), torch.zeros_like(e)
            )
        return k, -3.0 * e, omega
    e = torch.exp(-_SQRT5 * r)
    k = (1.0 + _SQRT5 * r + (5.0 / 3.0) * s) * e if value else None
    if need == 0:
        return k, None, None
    return k, -(5.0 / 3.0) * (1.0 + _SQRT5 * r) * e, (25.0 / 3.0) * e if need >= 2 else None


def _check_leaf(kernel: Kernel) -> None:
    """Raise for kernels whose first/second derivatives do not exist."""
    name = type(kernel).__name__
    if isinstance(kernel, MaternKernel) and kernel.nu == 0.5:
        raise KernelNotDifferentiableError(
            f"{name}(nu=0.5) is k = exp(-r), not differentiable at coincident inputs (x = x'): its GP has no "
            "mean-square derivative, so gradient and integrated-gradient covariances do not exist. "
            "Use nu=1.5 or nu=2.5."
        )
    cls = type(kernel).__name__
    if cls in ("IndexKernel", "HammingIMQKernel", "HammingKernel"):
        raise KernelNotDifferentiableError(f"{name} acts on discrete (categorical/index) inputs: no derivatives.")
    if cls == "PiecewisePolynomialKernel":
        if getattr(kernel, "q", None) == 0:
            raise KernelNotDifferentiableError(
                f"{name}(q=0) is (1 - r)^j_+, not differentiable at coincident inputs (x = x')."
            )
        raise NotImplementedError(
            f"{name} has no closed-form derivatives here and GPyTorch evaluates it through cdist, whose second "
            "derivative autograd cannot take at coincident inputs."
        )


def _closed_leaf(kernel: Kernel, x1: Tensor, x2: Tensor, npd: int, need: int) -> _Derivs:
    """Closed-form values/derivatives of a supported leaf on the broadcast block ``x1``, ``x2`` ``(*S, d)``."""
    if isinstance(kernel, _RADIAL):
        ls = _row(kernel.lengthscale, npd)
        z = (x1 - x2) / ls
        s = z.square().sum(-1)
        k, gamma, omega = _radial_profile(kernel, s, npd, need)
        if need == 0:
            return _Derivs(k)
        g1 = gamma.unsqueeze(-1) * z / ls
        if need == 1:
            return _Derivs(k, g1)
        lsl = ls.unsqueeze(-1) * ls.unsqueeze(-2)
        eye = torch.eye(z.size(-1), dtype=z.dtype, device=z.device)
        h = -(omega[..., None, None] * z.unsqueeze(-1) * z.unsqueeze(-2) + gamma[..., None, None] * eye) / lsl
        return _Derivs(k, g1, -g1, h)
    if isinstance(kernel, PeriodicKernel):
        lam = _row(kernel.lengthscale, npd)
        period = _row(kernel.period_length, npd)
        u = math.pi * (x1 - x2) / period
        k = torch.exp(-2.0 * (torch.sin(u).square() / lam).sum(-1))
        if need == 0:
            return _Derivs(k)
        a = -(2.0 * math.pi / (lam * period)) * torch.sin(2.0 * u)
        g1 = k.unsqueeze(-1) * a
        if need == 1:
            return _Derivs(k, g1)
        curv = (4.0 * math.pi**2 / (lam * period.square())) * torch.cos(2.0 * u)
        h = k[..., None, None] * (torch.diag_embed(curv) - a.unsqueeze(-1) * a.unsqueeze(-2))
        return _Derivs(k, g1, -g1, h)
    if isinstance(kernel, LinearKernel):
        v = _row(kernel.variance, npd)
        k = (x1 * x2 * v).sum(-1)
        if need == 0:
            return _Derivs(k)
        shape = (*k.shape, x1.size(-1))
        g1 = (v * x2).expand(shape)
        if need == 1:
            return _Derivs(k, g1)
        g2 = (v * x1).expand(shape)
        h = torch.diag_embed(v.expand(shape))
        return _Derivs(k, g1, g2, h)
    if isinstance(kernel, ConstantKernel):
        c = _scalar(kernel.constant[..., 0], npd)
        k = c * torch.ones_like(x1[..., 0] + x2[..., 0])
        if need == 0:
            return _Derivs(k)
        zero = torch.zeros((*k.shape, x1.size(-1)), dtype=k.dtype, device=k.device)
        return _Derivs(k, zero, zero, zero.unsqueeze(-1).expand(*zero.shape, x1.size(-1)) if need >= 2 else None)
    raise AssertionError(type(kernel))  # pragma: no cover


def _is_closed(kernel: Kernel, method: str) -> bool:
    return type(kernel) in _CLOSED and method == "auto"


def _derivs(
    kernel: Kernel, x1: Tensor, x2: Tensor, npd: int, need: int, method: str, apply_active: bool = True
) -> _Derivs:
    """Recursive values/derivatives of ``kernel`` on the broadcast block ``x1``, ``x2`` (``need``: 0, 1 or 2)."""
    _check_leaf(kernel)
    structural = type(kernel) in _STRUCT or _is_closed(kernel, method)
    if not structural:
        return _autograd_leaf(kernel, x1, x2, npd, need, use_call=apply_active)
    dims = x1.size(-1)
    idx = kernel.active_dims if apply_active else None
    if idx is not None:
        x1, x2 = x1.index_select(-1, idx), x2.index_select(-1, idx)
    if type(kernel) is ScaleKernel:
        res = _derivs(kernel.base_kernel, x1, x2, npd, need, method, apply_active=False)
        res = res.scale(_scalar(kernel.outputscale, npd))
    elif type(kernel) is AdditiveKernel:
        parts = [_derivs(c, x1, x2, npd, need, method) for c in kernel.kernels]
        res = parts[0]
        for p in parts[1:]:
            res = res + p
    elif type(kernel) is ProductKernel:
        parts = [_derivs(c, x1, x2, npd, need, method) for c in kernel.kernels]
        res = parts[0]
        for p in parts[1:]:
            res = res * p
    else:
        res = _closed_leaf(kernel, x1, x2, npd, need)
    return res.embed(idx, dims)


# ------------------------------------------------------------------------------------------------------- autograd
def _batched_grad(ys: Tensor, v: Tensor) -> Tensor:
    r"""Rows :math:`\partial y_l / \partial v` for a vector ``ys`` ``(L,)`` that is linear in ``v``: ``(L, *v)``."""
    if not ys.requires_grad:
        return v.new_zeros(ys.numel(), *v.shape)
    eye = torch.eye(ys.numel(), dtype=ys.dtype, device=ys.device)
    try:
        (res,) = torch.autograd.grad(
            ys, v, grad_outputs=eye, retain_graph=True, is_grads_batched=True, allow_unused=True
        )
        if res is None:
            return v.new_zeros(ys.numel(), *v.shape)
        return res
    except RuntimeError:
        rows = []
        for i in range(ys.numel()):
            if not ys[i].requires_grad:
                rows.append(torch.zeros_like(v))
                continue
            (g,) = torch.autograd.grad(ys[i], v, retain_graph=True, allow_unused=True)
            rows.append(torch.zeros_like(v) if g is None else g)
        return torch.stack(rows)


def _grad_vec(y: Tensor, x: Tensor) -> Tensor:
    """``dy/dx`` with graph (zeros if ``y`` does not depend on ``x``)."""
    if not y.requires_grad:
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(y, x, create_graph=True, allow_unused=True)
    return torch.zeros_like(x) if g is None else g


def _check_connected(K: Tensor, s: Tensor, t: Tensor, name: str) -> None:
    """Raise when ``K`` does not reach the input shifts ``s``/``t`` through autograd (forward left torch)."""
    connected = K.requires_grad
    if connected:
        grads = torch.autograd.grad(K.sum(), (s, t), retain_graph=True, allow_unused=True)
        connected = all(g is not None for g in grads)
    if not connected:
        raise KernelNotDifferentiableError(
            f"{name}'s output is disconnected from autograd with respect to its inputs (its forward leaves torch, "
            "e.g. computes in numpy and wraps the result with torch.tensor, or detaches x): its derivatives cannot "
            "be taken, and returning zeros would claim 'no effect' with zero variance. Implement forward with "
            "differentiable torch operations."
        )


def _autograd_leaf(kernel: Kernel, x1: Tensor, x2: Tensor, npd: int, need: int, use_call: bool) -> _Derivs:
    r"""Values/derivatives of an arbitrary kernel by autograd (see the module docs).

    Evaluates :math:`K_{pq}(\mathbf s, \mathbf t) = k(\mathbf x_p + \mathbf s, \mathbf x'_q + \mathbf t)` densely
    (one ``(m1, m2)`` block per leading index if the block has cross structure, else one ``1 x 1`` block per pair),
    with one extra first-argument row so that ``x1`` and ``x2`` never compare equal (kernels such as
    ``LinearKernel`` drop ``x2`` when ``torch.equal(x1, x2)``). Then
    :math:`\partial_{s_i} K_{pq} = \partial_i k`, :math:`\partial_{t_j} K_{pq} = \partial'_j k` and
    :math:`\partial_{s_i}\partial_{t_j} K_{pq} = \partial_i\partial'_j k` for all :math:`p, q` at once.
    """
    name = type(kernel).__name__
    d = x1.size(-1)
    shape = torch.broadcast_shapes(x1.shape[:-1], x2.shape[:-1])
    nb = len(shape) - npd
    bshape = torch.broadcast_shapes(shape[:nb], kernel.batch_shape)
    full = (*bshape, *shape[nb:])
    x1 = x1.reshape((1,) * (len(full) + 1 - x1.dim()) + tuple(x1.shape))
    x2 = x2.reshape((1,) * (len(full) + 1 - x2.dim()) + tuple(x2.shape))
    nbf = len(bshape)
    cross = npd >= 2 and x1.size(-2) == 1 and x2.size(-3) == 1
    if cross:
        m1, m2 = full[-2], full[-1]
        outer = full[nbf:-2]
        a1 = x1.squeeze(-2).expand(*bshape, *outer, m1, d)
        a2 = x2.squeeze(-3).expand(*bshape, *outer, m2, d)
    else:
        m1 = m2 = 1
        outer = full[nbf:]
        a1 = x1.expand(*full, d).unsqueeze(-2)
        a2 = x2.expand(*full, d).unsqueeze(-2)
    no = len(outer)
    perm = (*range(nbf, nbf + no), *range(nbf), nbf + no, nbf + no + 1)
    a1 = a1.permute(perm).reshape(-1, *bshape, m1, d)
    a2 = a2.permute(perm).reshape(-1, *bshape, m2, d)
    extra = 2 if m1 + 1 == m2 else 1
    a1 = torch.cat([a1, a1[..., :1, :].expand(*a1.shape[:-2], extra, d) + 1.0], dim=-2)

    def back(t: Tensor, tail: int) -> Tensor:
        """``(O, *bshape, m1, m2, *tail)`` -> ``(*bshape, *outer, [m1, m2,] *tail)``."""
        t = t.reshape(*outer, *bshape, m1, m2, *t.shape[t.dim() - tail :])
        inv = (*range(no, no + nbf), *range(no), *range(no + nbf, t.dim()))
        t = t.permute(inv)
        if not cross:
            t = t.reshape(*bshape, *outer, *t.shape[t.dim() - tail :])
        return t

    try:
        with torch.enable_grad(), gpytorch.settings.lazily_evaluate_kernels(False):
            s = torch.zeros(d, dtype=a1.dtype, device=a1.device, requires_grad=True)
            t = torch.zeros(d, dtype=a1.dtype, device=a1.device, requires_grad=True)
            fn = kernel if use_call else kernel.forward
            K = to_dense(fn(a1 + s, a2 + t))[..., :m1, :]
            K = K.expand(K.shape[0], *bshape, m1, m2)
            res = _Derivs(back(K.detach(), 0))
            if need >= 1:
                _check_connected(K, s, t, name)
                v = torch.ones_like(K, requires_grad=True)
                total = (K * v).sum()
                gs = _grad_vec(total, s)
                res.g1 = back(_batched_grad(gs, v).movedim(0, -1), 1)
                if need >= 2:
                    gt = _grad_vec(total, t)
                    res.g2 = back(_batched_grad(gt, v).movedim(0, -1), 1)
                    hst = torch.stack([_grad_vec(gs[i], t) for i in range(d)])
                    h = _batched_grad(hst.reshape(-1), v).reshape(d, d, *v.shape)
                    res.h = back(h.movedim(0, -1).movedim(0, -1), 2)
    except KernelNotDifferentiableError:
        raise
    except (RuntimeError, NotImplementedError) as err:
        raise NotImplementedError(
            f"Autograd derivatives of {name} failed ({err}). The kernel needs closed-form support or must be "
            "implemented with twice-differentiable torch operations."
        ) from err
    for part in (res.k, res.g1, res.g2, res.h):
        if part is not None and not torch.isfinite(part).all():
            raise KernelNotDifferentiableError(
                f"Autograd derivatives of {name} are not finite (typically at coincident inputs x = x'): the kernel "
                "is not (twice) differentiable there, or its implementation is not (e.g. sqrt of a squared "
                "distance). Gradient/IG covariances need a kernel that is twice differentiable at x = x'."
            )
    return res


# =====================================================================================================================
# Additive terms and kink subspaces
# =====================================================================================================================
def _compose(dims: Tensor | None, idx: Tensor | None) -> Tensor | None:
    if idx is None:
        return dims
    return idx if dims is None else dims.index_select(0, idx)


@dataclass
class _Term:
    """One additive term: ``prod(scales) * kernel(x[..., dims], x'[..., dims])``."""

    kernel: Kernel
    dims: Tensor | None
    scales: tuple[ScaleKernel, ...]
    apply_active: bool

    def derivs(self, x1: Tensor, x2: Tensor, npd: int, need: int, method: str) -> _Derivs:
        dims = x1.size(-1)
        if self.dims is not None:
            x1, x2 = x1.index_select(-1, self.dims), x2.index_select(-1, self.dims)
        res = _derivs(self.kernel, x1, x2, npd, need, method, apply_active=self.apply_active)
        for sc in self.scales:
            res = res.scale(_scalar(sc.outputscale, npd))
        return res.embed(self.dims, dims)

    def radial(self, method: str) -> tuple[Kernel, Tensor | None, Tensor | None] | None:
        """``(leaf, dims, outputscale)`` if the term is a (scaled) radial leaf with closed forms."""
        if type(self.kernel) not in _RADIAL or method != "auto":
            return None
        dims = _compose(self.dims, self.kernel.active_dims if self.apply_active else None)
        scale = None
        for sc in self.scales:
            scale = sc.outputscale if scale is None else scale * sc.outputscale
        return self.kernel, dims, scale


def _terms(kernel: Kernel, dims: Tensor | None = None, scales: tuple = (), apply_active: bool = True) -> list[_Term]:
    """Split a kernel into additive terms (through ``ScaleKernel`` and ``AdditiveKernel``)."""
    if type(kernel) is ScaleKernel:
        d = _compose(dims, kernel.active_dims) if apply_active else dims
        return _terms(kernel.base_kernel, d, (*scales, kernel), False)
    if type(kernel) is AdditiveKernel:
        d = _compose(dims, kernel.active_dims) if apply_active else dims
        return [t for c in kernel.kernels for t in _terms(c, d, scales, True)]
    return [_Term(kernel, dims, scales, apply_active)]


@dataclass
class _Kink:
    """A Matérn leaf's input columns ``dims`` ``(s,)`` and its lengthscales there ``ls`` ``(*kb, s)``."""

    dims: Tensor
    ls: Tensor

    def scaled(self, v: Tensor, npd: int) -> Tensor:
        """Columns ``dims`` of ``v`` ``(*B, *P, D)`` in lengthscale units (``npd`` point dimensions)."""
        ls = self.ls.reshape(*self.ls.shape[:-1], *([1] * npd), self.ls.size(-1))
        return v.index_select(-1, self.dims) / ls


def _kinks(kernel: Kernel, dims: Tensor | None, apply_active: bool, total: int) -> list[_Kink]:
    """Matérn leaves in ``kernel`` (where integrands are only finitely smooth), in input columns."""
    if apply_active:
        dims = _compose(dims, kernel.active_dims)
    if type(kernel) is ScaleKernel:
        return _kinks(kernel.base_kernel, dims, False, total)
    if type(kernel) in (AdditiveKernel, ProductKernel):
        return [s for c in kernel.kernels for s in _kinks(c, dims, True, total)]
    if isinstance(kernel, MaternKernel):
        idx = torch.arange(total, device=kernel.lengthscale.device) if dims is None else dims
        ls = kernel.lengthscale[..., 0, :].detach()
        return [_Kink(idx, ls.expand(*ls.shape[:-1], idx.numel()))]
    return []


def _term_kinks(term: _Term, total: int) -> list[_Kink]:
    seen: dict[tuple[int, ...], _Kink] = {}
    for kink in _kinks(term.kernel, term.dims, term.apply_active, total):
        seen.setdefault(tuple(sorted(set(kink.dims.tolist()))), kink)
    return list(seen.values())


def _graded(center: Tensor, width: Tensor, exact: Tensor, tol: float) -> Tensor:
    r"""Breakpoints at ``center`` and, unless ``exact``, geometrically graded around it:
    :math:`c \pm w 4^j`, :math:`j = 0..J-1` (``width`` :math:`w`), so that a near-singularity at complex
    distance :math:`w` from :math:`c` is resolved by panels no longer than 3x their distance to it. Points
    outside :math:`(\mathrm{tol}, 1 - \mathrm{tol})` are replaced by 1 (zero-length panels). ``(…, 1 + 2J)``."""
    steps = width.unsqueeze(-1) * (4.0 ** torch.arange(_GRADE_STEPS, dtype=width.dtype, device=width.device))
    steps = torch.where(exact.unsqueeze(-1), torch.full_like(steps, 2.0), steps)
    pts = torch.cat([center.unsqueeze(-1), center.unsqueeze(-1) - steps, center.unsqueeze(-1) + steps], -1)
    ok = (pts > tol) & (pts < 1 - tol)
    return torch.where(ok, pts, torch.ones_like(pts))


# =====================================================================================================================
# Input handling
# =====================================================================================================================
def _validate_kernel(kernel: Kernel) -> None:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a gpytorch Kernel, got {type(kernel).__name__}.")


def _check_method(method: str) -> None:
    if method not in ("auto", "autograd"):
        raise ValueError(f"method must be 'auto' or 'autograd', got {method!r}.")


def _setup(kernel: Kernel, *xs: Tensor) -> tuple[torch.Size, list[Tensor]]:
    """Validate point sets ``(*batch, m, D)`` and expand them to the common batch shape."""
    _validate_kernel(kernel)
    dims = xs[0].size(-1)
    for x in xs:
        if x.dim() < 2:
            raise ValueError(f"inputs must be (*batch, m, D), got shape {tuple(x.shape)}.")
        if not x.is_floating_point():
            raise ValueError("inputs must be floating point.")
        check_inputs(x, dims)
    bshape = torch.broadcast_shapes(kernel.batch_shape, *(x.shape[:-2] for x in xs))
    return bshape, [x.expand(*bshape, *x.shape[-2:]) for x in xs]


def _as_baselines(baselines: Tensor | IntegratedGradient, like: Tensor) -> Tensor:
    if isinstance(baselines, IntegratedGradient):
        baselines = baselines.baselines
    b = torch.as_tensor(baselines, dtype=like.dtype, device=like.device)
    if b.dim() == 1:
        b = b.unsqueeze(0)
    if b.dim() != 2 or b.size(0) == 0:
        raise ValueError(f"baselines must be (D,) or (k, D) with k >= 1, got shape {tuple(b.shape)}.")
    check_inputs(b, like.size(-1))
    return b


def _chunks(total: int, per_item: int, block: int) -> list[tuple[int, int]]:
    step = max(1, int(block) // max(1, per_item))
    return [(i, min(total, i + step)) for i in range(0, total, step)]


def _numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape)) if len(shape) else 1


def _owner_eval(
    fn: Callable[[Tensor, Tensor, int], _Derivs], a1: Tensor, a2: Tensor, owner: Tensor, bshape: torch.Size
) -> _Derivs:
    """Evaluate ``fn`` on per-owner point blocks ``a1`` ``(Ns, N, D)``, ``a2`` ``(Ns, N or 1, D)``.

    Block ``s`` belongs to batch entry ``owner[s]`` (flat index into ``bshape``): all batch entries are evaluated
    and the owner's is kept.
    """
    nb = len(bshape)
    view = (1,) * nb
    res = fn(a1.reshape(*view, *a1.shape), a2.reshape(*view, *a2.shape), 2)
    ns = a1.size(0)
    rows = torch.arange(ns, device=a1.device)

    def pick(t: Tensor | None, tail: int) -> Tensor | None:
        if t is None:
            return None
        t = t.expand(*bshape, *t.shape[t.dim() - 2 - tail :])
        t = t.reshape(_numel(bshape), *t.shape[nb:])
        return t[owner, rows]

    return _Derivs(pick(res.k, 0), pick(res.g1, 1), pick(res.g2, 1), pick(res.h, 2))


# =====================================================================================================================
# Public: derivatives
# =====================================================================================================================
def kernel_derivatives(
    kernel: Kernel, x1: Tensor, x2: Tensor, *, pairwise: bool = False, order: int = 2, method: str = "auto"
) -> tuple[Tensor, ...]:
    r"""Kernel values and derivatives, cross (``(*batch, m1, m2, ...)``) or pairwise (``(*batch, m, ...)``).

    Evaluated in one block (no chunking); exact at coincident points for the closed-form leaves.

    :return: ``(k,)``, ``(k, g1)`` or ``(k, g1, g2, h)`` for ``order`` 0, 1, 2 with
        :math:`g_{1,i} = \partial k/\partial x_i`, :math:`g_{2,j} = \partial k/\partial x'_j`,
        :math:`h_{ij} = \partial^2 k/\partial x_i\partial x'_j` (trailing ``D`` / ``D x D``).
    """
    _check_method(method)
    if order not in (0, 1, 2):
        raise ValueError(f"order must be 0, 1 or 2, got {order!r}.")
    bshape, (x1, x2) = _setup(kernel, x1, x2)
    dims = x1.size(-1)
    if pairwise:
        if x1.shape != x2.shape:
            raise ValueError("pairwise evaluation needs x1 and x2 of equal shape.")
        res = _derivs(kernel, x1, x2, 1, order, method)
        shape = x1.shape[:-1]
    else:
        res = _derivs(kernel, x1.unsqueeze(-2), x2.unsqueeze(-3), 2, order, method)
        shape = (*bshape, x1.size(-2), x2.size(-2))
    out = [res.k.expand(shape)]
    if order >= 1:
        out.append(res.g1.expand(*shape, dims))
    if order == 2:
        out += [res.g2.expand(*shape, dims), res.h.expand(*shape, dims, dims)]
    return tuple(out)


def grad_cross(
    kernel: Kernel, x: Tensor, X: Tensor, *, method: str = "auto", block_size: int = DEFAULT_BLOCK
) -> Tensor:
    r""":math:`\operatorname{Cov}(\partial_i f(\mathbf x_p), f(\mathbf X_j)) = \partial_i k(\mathbf x_p, \mathbf
    X_j)`, ``(*batch, m, D, n)``.

    :param method: ``"auto"`` (closed forms for supported leaves, autograd otherwise) or ``"autograd"`` (autograd
        for every leaf; a diagnostic -- not valid at coincident points for GPyTorch's distance-based kernels).
    """
    _check_method(method)
    bshape, (x, X) = _setup(kernel, x, X)
    m, dims, n = x.size(-2), x.size(-1), X.size(-2)
    out = x.new_zeros(*bshape, m, dims, n)
    for p0, p1 in _chunks(m, 4 * n * dims * _numel(bshape), block_size):
        g1 = _derivs(kernel, x[..., p0:p1, None, :], X.unsqueeze(-3), 2, 1, method).g1
        out[..., p0:p1, :, :] = g1.expand(*bshape, p1 - p0, n, dims).transpose(-1, -2)
    return out


def grad_joint(
    kernel: Kernel, x1: Tensor, x2: Tensor, *, method: str = "auto", block_size: int = DEFAULT_BLOCK
) -> Tensor:
    r""":math:`\operatorname{Cov}(\partial_i f(\mathbf x_p), \partial_j f(\mathbf x'_q)) = \partial_i\partial'_j
    k(\mathbf x_p, \mathbf x'_q)`, ``(*batch, m1, D, m2, D)``.

    Exact at coincident points (closed forms, e.g. :math:`\sigma^2\tfrac53\delta_{ij}/\ell_i^2` for Matérn-5/2).
    """
    _check_method(method)
    bshape, (x1, x2) = _setup(kernel, x1, x2)
    m1, dims, m2 = x1.size(-2), x1.size(-1), x2.size(-2)
    out = x1.new_zeros(*bshape, m1, dims, m2, dims)
    for p0, p1 in _chunks(m1, 6 * m2 * dims * dims * _numel(bshape), block_size):
        h = _derivs(kernel, x1[..., p0:p1, None, :], x2.unsqueeze(-3), 2, 2, method).h
        out[..., p0:p1, :, :, :] = h.expand(*bshape, p1 - p0, m2, dims, dims).transpose(-2, -3)
    return out


def grad_point(kernel: Kernel, x: Tensor, *, method: str = "auto", block_size: int = DEFAULT_BLOCK) -> Tensor:
    r""":math:`\operatorname{Var}`-blocks :math:`\partial_i\partial'_j k(\mathbf x_p, \mathbf x_p)`,
    ``(*batch, m, D, D)``."""
    _check_method(method)
    bshape, (x,) = _setup(kernel, x)
    m, dims = x.size(-2), x.size(-1)
    out = x.new_zeros(*bshape, m, dims, dims)
    for p0, p1 in _chunks(m, 6 * dims * dims * _numel(bshape), block_size):
        xs = x[..., p0:p1, :]
        out[..., p0:p1, :, :] = _derivs(kernel, xs, xs, 1, 2, method).h.expand(*bshape, p1 - p0, dims, dims)
    return out


# =====================================================================================================================
# Public: integrated gradients, 1-D paths
# =====================================================================================================================
def _finish(out: Tensor, return_error: bool) -> Tensor | tuple[Tensor, Tensor]:
    if return_error:
        return out[0], (out[0] - out[1]).abs()
    return out[0]


def ig_cross(
    kernel: Kernel,
    x: Tensor,
    baselines: Tensor | IntegratedGradient,
    X: Tensor,
    *,
    order: int = DEFAULT_ORDER_1D,
    return_error: bool = False,
    method: str = "auto",
    kink_tol: float = DEFAULT_KINK_TOL,
    block_size: int = DEFAULT_BLOCK,
) -> Tensor | tuple[Tensor, Tensor]:
    r""":math:`\operatorname{Cov}(\mathrm{IG}_i f(\mathbf x_p), f(\mathbf X_j)) = \frac1k\sum_r \Delta_{pr,i}
    \int_0^1 \partial_i k(\mathbf b_r + t\boldsymbol\Delta_{pr}, \mathbf X_j)\,dt`, ``(*batch, m, D, n)``.

    Gauss–Legendre of ``order`` nodes; where a path crosses a data point inside a Matérn leaf's active dimensions
    the rule is split at the crossing (the integrand has a kink there).

    :param return_error: also return :math:`|I_N - I_{N/2}|` (same shape).
    :param kink_tol: relative distance under which a path counts as passing through a point.
    """
    _check_method(method)
    orders = _orders(order, return_error)
    bshape, (x, X) = _setup(kernel, x, X)
    b = _as_baselines(baselines, x)
    tol = _tol(kink_tol, x)
    m, dims, n, k = x.size(-2), x.size(-1), X.size(-2), b.size(0)
    rules = [_gl(q, x) for q in orders]
    nodes = torch.cat([r[0] for r in rules])
    nn = nodes.numel()
    weights = x.new_zeros(len(orders), nn)
    off = 0
    for i, (tq, wq) in enumerate(rules):
        weights[i, off : off + tq.numel()] = wq
        off += tq.numel()
    out = x.new_zeros(len(orders), *bshape, m, dims, n)
    nbat = _numel(bshape)
    for term in _terms(kernel):
        _probe_term(term, x, method)
        kinks = _term_kinks(term, dims)
        radial = term.radial(method)
        per_point = k * nn * n * (2 if radial is not None else 3 * dims) * nbat
        for p0, p1 in _chunks(m, per_point, block_size):
            delta = x[..., p0:p1, None, :] - b  # (*B, P, k, D)
            if radial is not None:
                contrib = _cross_radial(radial, delta, b, X, nodes, weights)
            else:
                pts = b.unsqueeze(-2) + nodes[:, None] * delta.unsqueeze(-2)  # (*B, P, k, N, D)
                pts = pts.reshape(*bshape, -1, 1, dims)
                g1 = term.derivs(pts, X.unsqueeze(-3), 2, 1, method).g1
                g1 = g1.expand(*bshape, pts.size(-3), n, dims).reshape(*bshape, p1 - p0, k, nn, n, dims)
                contrib = torch.einsum("Rq,...prqjd,...prd->R...pdj", weights, g1, delta)
            out[..., p0:p1, :, :] += contrib / k
            if kinks:
                _cross_kink_correction(term, kinks, out, p0, delta, b, X, orders, method, tol, block_size)
    return _finish(out, return_error)


def _probe_term(term: _Term, x: Tensor, method: str) -> None:
    x0 = x.reshape(-1, x.size(-1))[:1]
    with torch.no_grad():
        term.derivs(x0, x0, 1, 2, method)


def _cross_radial(
    radial: tuple[Kernel, Tensor | None, Tensor | None],
    delta: Tensor,
    b: Tensor,
    X: Tensor,
    nodes: Tensor,
    weights: Tensor,
) -> Tensor:
    r"""Fast IG-cross block of a scaled radial leaf.

    With :math:`\mathbf z = (\mathbf b + t\boldsymbol\Delta - \mathbf X_j)/\boldsymbol\ell` and
    :math:`\partial_i k = \sigma^2\gamma(s) z_i/\ell_i`,

    .. math::

        \sum_q w_q \partial_i k(\mathbf a(t_q), \mathbf X_j) = \frac{\sigma^2}{\ell_i^2}\Big[(b_i - X_{ji})
        \sum_q w_q\gamma_{qj} + \Delta_i \sum_q w_q t_q \gamma_{qj}\Big],

    so only the scalar profile :math:`\gamma` is needed at the nodes (distances by ``cdist`` without the
    matmul expansion, i.e. exact differences).
    """
    leaf, dims, scale = radial
    nbat = delta.dim() - 3
    bshape = delta.shape[:nbat]
    p, k, full = delta.size(-3), delta.size(-2), delta.size(-1)
    if dims is not None:
        delta_s, b_s, X_s = delta.index_select(-1, dims), b.index_select(-1, dims), X.index_select(-1, dims)
    else:
        delta_s, b_s, X_s = delta, b, X
    ls = leaf.lengthscale[..., 0, :]  # (*kb, c)
    ls_b = ls.reshape(*ls.shape[:-1], 1, 1, 1, ls.size(-1))
    pts = (b_s.unsqueeze(-2) + nodes[:, None] * delta_s.unsqueeze(-2)) / ls_b  # (*B, P, k, N, d)
    nn = nodes.numel()
    pts = pts.expand(*bshape, p, k, nn, pts.size(-1)).reshape(*bshape, p * k * nn, pts.size(-1))
    Xl = (X_s / ls.unsqueeze(-2)).expand(*bshape, X.size(-2), pts.size(-1))
    r = torch.cdist(pts, Xl, compute_mode="donot_use_mm_for_euclid_dist")
    _, gamma, _ = _radial_profile(leaf, r.square(), 2, 1, r=r, value=False)
    gamma = gamma.expand(*bshape, p * k * nn, X.size(-2)).reshape(*bshape, p, k, nn, X.size(-2))
    s0 = torch.einsum("Rq,...prqj->R...prj", weights, gamma)
    s1 = torch.einsum("Rq,q,...prqj->R...prj", weights, nodes, gamma)
    # (1/ℓ_i²) Σ_r Δ_ri [(b_ri - X_ji) S0 + Δ_ri S1]
    t1 = torch.einsum("...pri,ri,R...prj->R...pij", delta_s, b_s, s0)
    t2 = torch.einsum("...pri,R...prj->R...pij", delta_s, s0) * X_s.transpose(-1, -2).unsqueeze(-3)
    t3 = torch.einsum("...pri,R...prj->R...pij", delta_s.square(), s1)
    inv = ls.square().reciprocal().reshape(*ls.shape[:-1], 1, ls.size(-1), 1)
    res = (t1 - t2 + t3) * inv
    if scale is not None:
        res = res * scale.reshape(*scale.shape, 1, 1, 1)
    if dims is None:
        return res
    return res.new_zeros(*res.shape[:-2], full, res.size(-1)).index_add(-2, dims, res)


def _cross_kink_correction(
    term: _Term,
    kinks: list[_Kink],
    out: Tensor,
    p0: int,
    delta: Tensor,
    b: Tensor,
    X: Tensor,
    orders: tuple[int, ...],
    method: str,
    tol: float,
    block_size: int,
) -> None:
    r"""Re-integrate (path, point) pairs whose path passes through or close to the point in a kink subspace.

    In lengthscale units of the Matérn leaf (columns :math:`S`), with :math:`\mathbf c = \mathbf b - \mathbf X_j`,
    :math:`\boldsymbol\alpha = \boldsymbol\Delta`, the closest approach is at :math:`t^* = -\mathbf c\cdot
    \boldsymbol\alpha/\|\boldsymbol\alpha\|^2` with distance :math:`d = \|\mathbf c + t^*\boldsymbol\alpha\|`.
    For :math:`t^* \in (\mathrm{tol}, 1 - \mathrm{tol})` and :math:`w = d/\|\boldsymbol\alpha\| <` ``_NEAR``
    the rule is split at :math:`t^*` (a kink if :math:`d \approx 0`) and, for :math:`d > 0`, graded around it
    (:func:`_graded`); the plain rule's contribution (already added) is subtracted.
    """
    nbat = delta.dim() - 3
    bshape = delta.shape[:nbat]
    P, k, dims = delta.size(-3), delta.size(-2), delta.size(-1)
    n = X.size(-2)
    shape = (*bshape, P, k, n)
    flat_parts, brk_parts = [], []
    for kink in kinks:
        alpha = kink.scaled(delta, 2)  # (*B, P, k, s)
        bS = kink.scaled(b.unsqueeze(0), 2).expand_as(alpha)  # (*B, P, k, s)
        XS = kink.scaled(X, 1)  # (*B, n, s)
        aa = alpha.square().sum(-1)  # (*B, P, k)
        ca = (bS * alpha).sum(-1).unsqueeze(-1) - torch.einsum("...js,...prs->...prj", XS, alpha)
        tstar = -ca / torch.where(aa > 0, aa, torch.ones_like(aa)).unsqueeze(-1)
        cand = (aa > 0).unsqueeze(-1) & (tstar > tol) & (tstar < 1 - tol)
        idx = cand.nonzero(as_tuple=True)
        if idx[0].numel() == 0:
            continue
        bidx = idx[:nbat]
        al = alpha[(*bidx, idx[nbat], idx[nbat + 1])]
        c = bS[(*bidx, idx[nbat], idx[nbat + 1])] - XS[(*bidx, idx[nbat + 2])]
        ts = tstar[idx]
        dist2 = (c + ts.unsqueeze(-1) * al).square().sum(-1)
        a2 = al.square().sum(-1)
        exact = dist2 <= tol**2 * torch.maximum(c.square().sum(-1), a2)
        width = (dist2 / a2).sqrt()
        near = exact | (width < _NEAR)
        if not bool(near.any()):
            continue
        sel = tuple(i[near] for i in idx)
        flat_parts.append(_ravel(sel, shape))
        brk_parts.append(_graded(ts[near], width[near], exact[near], tol))
    if not flat_parts:
        return
    # merge the kinks' breakpoints per special (path, point) pair
    flat = torch.cat(flat_parts)
    uniq, inv = torch.unique(flat, return_inverse=True)
    ns = uniq.numel()
    width_b = brk_parts[0].size(-1)
    bp = delta.new_ones(ns, len(brk_parts) * width_b)
    off = 0
    for i, part in enumerate(brk_parts):
        bp[inv[off : off + part.size(0)], i * width_b : (i + 1) * width_b] = part
        off += part.size(0)
    sidx = torch.unravel_index(uniq, shape)
    owner = _flat_owner(sidx[:nbat], bshape, ns, delta.device)
    pi, ri, ji = sidx[nbat], sidx[nbat + 1], sidx[nbat + 2]
    brk = bp.sort(-1).values
    brk = brk[:, : max(1, int((brk < 1).sum(-1).max()))]  # (Ns, M)
    edges = torch.cat([brk.new_zeros(ns, 1), brk, brk.new_ones(ns, 1)], -1)
    length = edges[:, 1:] - edges[:, :-1]  # (Ns, M+1)
    tl, wl = [], []
    for q in orders:
        tq, wq = _gl(q, delta)
        tl.append((edges[:, :-1, None] + length[..., None] * tq).reshape(ns, -1))
        wl.append((length[..., None] * wq).reshape(ns, -1))
        tl.append(tq.expand(ns, q))
        wl.append(-wq.expand(ns, q))
    nodes = torch.cat(tl, -1)  # (Ns, N)
    w = delta.new_zeros(len(orders), ns, nodes.size(-1))
    off = 0
    for i in range(len(orders)):
        for part in (wl[2 * i], wl[2 * i + 1]):
            w[i, :, off : off + part.size(-1)] = part
            off += part.size(-1)
    dflat = delta.reshape(-1, P, k, dims)
    Xflat = X.reshape(-1, n, dims)
    dsel = dflat[owner, pi, ri]  # (Ns, D)
    start = b[ri]  # (Ns, D)
    xj = Xflat[owner, ji]  # (Ns, D)
    oflat = out.reshape(out.size(0), -1, *out.shape[-3:])
    per = 3 * nodes.size(-1) * dims * max(1, _numel(bshape))
    for c0, c1 in _chunks(ns, per, block_size):
        pts = start[c0:c1, None, :] + nodes[c0:c1, :, None] * dsel[c0:c1, None, :]
        g1 = _owner_eval(
            lambda a1, a2, npd: term.derivs(a1, a2, npd, 1, method),
            pts,
            xj[c0:c1, None, :],
            owner[c0:c1],
            bshape,
        ).g1  # (Ns, N, D)
        corr = torch.einsum("Rsn,snd->Rsd", w[:, c0:c1], g1) * dsel[c0:c1] / k
        dcol = torch.arange(dims, device=delta.device)
        index = (owner[c0:c1, None], pi[c0:c1, None] + p0, dcol, ji[c0:c1, None])
        for R in range(out.size(0)):
            oflat[R].index_put_(index, corr[R], accumulate=True)


def _ravel(idx: tuple[Tensor, ...], shape: Sequence[int]) -> Tensor:
    """Flat (row-major) index from per-dimension indices."""
    flat = torch.zeros_like(idx[0])
    for i, size in zip(idx, shape, strict=True):
        flat = flat * size + i
    return flat


def _flat_owner(bidx: tuple[Tensor, ...], bshape: Sequence[int], count: int, device: torch.device) -> Tensor:
    """Flat batch index from per-dimension batch indices (``count`` entries)."""
    flat = torch.zeros(count, dtype=torch.long, device=device)
    for i, size in zip(bidx, bshape, strict=True):
        flat = flat * size + i
    return flat


# =====================================================================================================================
# Public: integrated gradients, 2-D path pairs
# =====================================================================================================================
def ig_joint(
    kernel: Kernel,
    x1: Tensor,
    baselines: Tensor | IntegratedGradient,
    x2: Tensor,
    baselines2: Tensor | IntegratedGradient | None = None,
    *,
    order: int = DEFAULT_ORDER_2D,
    return_error: bool = False,
    method: str = "auto",
    kink_tol: float = DEFAULT_KINK_TOL,
    block_size: int = DEFAULT_BLOCK,
) -> Tensor | tuple[Tensor, Tensor]:
    r""":math:`\operatorname{Cov}(\mathrm{IG}_i f(\mathbf x_p), \mathrm{IG}_j f(\mathbf x'_q))`,
    ``(*batch, m1, D, m2, D)``.

    .. math::

        \frac{1}{k k'}\sum_{r,s} \Delta_{pr,i}\Delta'_{qs,j} \int_0^1\!\!\int_0^1 \partial_i\partial'_j
        k(\mathbf b_r + t\boldsymbol\Delta_{pr}, \mathbf b'_s + u\boldsymbol\Delta'_{qs})\,dt\,du,

    by tensor Gauss–Legendre (``order`` per dimension) for smooth terms and by Duffy-mapped triangles (split along
    the kinks, see the module docs) for Matérn terms. ``baselines2`` defaults to ``baselines``.
    """
    _check_method(method)
    orders = _orders(order, return_error)
    bshape, (x1, x2) = _setup(kernel, x1, x2)
    b1 = _as_baselines(baselines, x1)
    b2 = b1 if baselines2 is None else _as_baselines(baselines2, x1)
    m1, dims, m2 = x1.size(-2), x1.size(-1), x2.size(-2)
    k1, k2 = b1.size(0), b2.size(0)
    n2 = m2 * k2
    total = m1 * k1 * n2
    out = x1.new_zeros(len(orders), *bshape, m1 * m2, dims, dims)

    def pairs(f0: int, f1: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        f = torch.arange(f0, f1, device=x1.device)
        i1, i2 = f // n2, f % n2
        p, r, q, s = i1 // k1, i1 % k1, i2 // k2, i2 % k2
        return p, r, q, s, p * m2 + q

    _ig2(kernel, x1, b1, x2, b2, pairs, total, out, orders, method, _tol(kink_tol, x1), block_size)
    out = out.reshape(len(orders), *bshape, m1, m2, dims, dims).transpose(-2, -3) / (k1 * k2)
    return _finish(out, return_error)


def ig_point(
    kernel: Kernel,
    x: Tensor,
    baselines: Tensor | IntegratedGradient,
    *,
    order: int = DEFAULT_ORDER_2D,
    return_error: bool = False,
    method: str = "auto",
    kink_tol: float = DEFAULT_KINK_TOL,
    block_size: int = DEFAULT_BLOCK,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Per-point blocks :math:`\operatorname{Cov}(\mathrm{IG}_i f(\mathbf x_p), \mathrm{IG}_j f(\mathbf x_p))`,
    ``(*batch, m, D, D)``.

    A path with itself has its kink on the diagonal :math:`t = u` and two baselines of the same point meet at
    :math:`(1, 1)`; both are integrated on Duffy-mapped triangles (module docs).
    """
    _check_method(method)
    orders = _orders(order, return_error)
    bshape, (x,) = _setup(kernel, x)
    b = _as_baselines(baselines, x)
    m, dims, k = x.size(-2), x.size(-1), b.size(0)
    out = x.new_zeros(len(orders), *bshape, m, dims, dims)

    def pairs(f0: int, f1: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        f = torch.arange(f0, f1, device=x.device)
        p, rs = f // (k * k), f % (k * k)
        return p, rs // k, p, rs % k, p

    _ig2(kernel, x, b, x, b, pairs, m * k * k, out, orders, method, _tol(kink_tol, x), block_size)
    return _finish(out / (k * k), return_error)


def _ig2(
    kernel: Kernel,
    x1: Tensor,
    b1: Tensor,
    x2: Tensor,
    b2: Tensor,
    pairs: Callable[[int, int], tuple[Tensor, Tensor, Tensor, Tensor, Tensor]],
    total: int,
    out: Tensor,
    orders: tuple[int, ...],
    method: str,
    tol: float,
    block_size: int,
) -> None:
    r"""Accumulate :math:`\Delta_i\Delta'_j\iint \partial_i\partial'_j k` of path pairs into ``out[R, *B, slot]``.

    ``pairs(f0, f1)`` gives, for flat pair indices ``f0:f1``, the first path's point and baseline ``(p, r)``, the
    second's ``(q, s)`` and the output slot.
    """
    nbat = x1.dim() - 2
    bshape = x1.shape[:nbat]
    dims = x1.size(-1)
    nrule = len(orders)
    oflat = out.reshape(nrule, *bshape, -1, dims, dims)
    for term in _terms(kernel):
        _probe_term(term, x1, method)
        kinks = _term_kinks(term, dims)
        radial = term.radial(method)
        # nodes per pair (upper bound for the kink-free count; breakpoints add panels)
        per_node = (4 * dims if radial is not None else 8 * dims * dims) * _numel(bshape)
        npair_nodes = sum((2 if kinks else 1) * q * q for q in orders)
        for f0, f1 in _chunks(total, per_node * npair_nodes * (1 + len(kinks)), block_size):
            p, r, q, s, slot = pairs(f0, f1)
            start1, start2 = b1[r], b2[s]  # (Pc, D)
            d1 = x1.index_select(-2, p) - start1  # (*B, Pc, D)
            d2 = x2.index_select(-2, q) - start2
            if kinks:
                T, U, W, special, feats = _corner_rules(start1 - start2, d1, d2, kinks, orders, tol)
            else:
                T, U, W = _tensor_rule(orders, x1)
                special, feats = None, None
            W = W.expand(nrule, *bshape, d1.size(-2), W.size(-1))
            if radial is not None:
                res = _pair_radial(radial, start1 - start2, d1, d2, T, U, W)
            else:
                a1 = start1.unsqueeze(-2) + T.unsqueeze(-1) * d1.unsqueeze(-2)
                a2 = start2.unsqueeze(-2) + U.unsqueeze(-1) * d2.unsqueeze(-2)
                h = term.derivs(a1, a2, 2, 2, method).h  # (*B, Pc, N, D, D)
                res = torch.einsum("R...pn,...pnij->R...pij", W, h)
            res = res * (d1.unsqueeze(-1) * d2.unsqueeze(-2))
            if special is not None and special.any():
                _special_pairs(term, method, res, special, feats, start1, start2, d1, d2, orders, block_size)
            oflat.index_add_(nbat + 1, slot, res)


def _tensor_rule(orders: tuple[int, ...], like: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Tensor GL rules on the unit square (shared by all pairs): ``T, U (1, N)``, ``W (R, 1, N)``."""
    ts, us, ws = [], [], []
    for q in orders:
        tq, wq = _gl(q, like)
        ts.append(tq.repeat_interleave(q))
        us.append(tq.repeat(q))
        ws.append((wq[:, None] * wq[None, :]).reshape(-1))
    T, U = torch.cat(ts)[None], torch.cat(us)[None]
    W = like.new_zeros(len(orders), 1, T.size(-1))
    off = 0
    for i, w in enumerate(ws):
        W[i, 0, off : off + w.numel()] = w
        off += w.numel()
    return T, U, W


@dataclass
class _Features:
    r"""Singular features of path pairs per kink: points ``(*B, P, M, 2)`` and lines ``A t + B u + C = 0``.

    Points are exact crossings or near-misses (``is_near``; distance ``dist`` in lengthscale units); ``gram`` holds
    :math:`(\|\boldsymbol\alpha\|^2, \|\boldsymbol\beta\|^2, \boldsymbol\alpha\cdot\boldsymbol\beta)`.
    """

    is_point: Tensor  # (*B, P, M)
    point: Tensor  # (*B, P, M, 2)
    is_line: Tensor  # (*B, P, M)
    line: Tensor  # (*B, P, M, 3)
    is_near: Tensor  # (*B, P, M)
    dist: Tensor  # (*B, P, M)
    gram: Tensor  # (*B, P, M, 3)
    alpha: list[Tensor]  # per kink, scaled path directions (*B, P, s)
    beta: list[Tensor]


def _pair_features(c: Tensor, d1: Tensor, d2: Tensor, kinks: list[_Kink], tol: float) -> _Features:
    r"""Where :math:`P_S(\mathbf c + t\boldsymbol\alpha - u\boldsymbol\beta) = 0` in :math:`[0,1]^2`.

    :math:`\mathbf c = \mathbf b - \mathbf b'`, :math:`\boldsymbol\alpha = \boldsymbol\Delta`,
    :math:`\boldsymbol\beta = \boldsymbol\Delta'` (lengthscale units of each kink). Non-parallel
    :math:`\boldsymbol\alpha, \boldsymbol\beta`: least-squares :math:`(t^*, u^*)` (a point if the residual
    vanishes); parallel and collinear with :math:`\mathbf c`: the line :math:`(\boldsymbol\alpha\cdot\mathbf v)t
    - (\boldsymbol\beta\cdot\mathbf v)u + \mathbf c\cdot\mathbf v = 0` (:math:`\mathbf v` the common unit
    direction), kept if it cuts the open square.
    """
    c = c.expand_as(d1)
    pts, ispt, lines, isln, alphas, betas = [], [], [], [], [], []
    isnear, dists, grams = [], [], []
    tiny = torch.finfo(c.dtype).tiny
    for kink in kinks:
        cs, al, be = kink.scaled(c, 1), kink.scaled(d1, 1), kink.scaled(d2, 1)
        cs, al, be = torch.broadcast_tensors(cs, al, be)
        alphas.append(al)
        betas.append(be)
        aa, bb, ab = (al * al).sum(-1), (be * be).sum(-1), (al * be).sum(-1)
        ca, cb = (cs * al).sum(-1), (cs * be).sum(-1)
        cc = (cs * cs).sum(-1)
        scale2 = torch.maximum(torch.maximum(aa, bb), cc)
        det = aa * bb - ab * ab
        nonpar = (det > 1e-14 * aa * bb) & (aa > 0) & (bb > 0)
        dsafe = torch.where(nonpar, det, torch.ones_like(det))
        ts = (ab * cb - ca * bb) / dsafe
        us = (aa * cb - ab * ca) / dsafe
        e = cs + ts.unsqueeze(-1) * al - us.unsqueeze(-1) * be
        inside = (ts >= -tol) & (ts <= 1 + tol) & (us >= -tol) & (us <= 1 + tol)
        point = nonpar & inside & (e.square().sum(-1) <= tol**2 * scale2) & (scale2 > tiny)
        pts.append(torch.stack([ts.clamp(0, 1), us.clamp(0, 1)], -1))
        ispt.append(point)
        use_a = aa >= bb
        vn = torch.where(use_a, aa, bb).clamp_min(tiny).sqrt()
        v = torch.where(use_a.unsqueeze(-1), al, be) / vn.unsqueeze(-1)
        A, Bc, C = (al * v).sum(-1), -(be * v).sum(-1), (cs * v).sum(-1)
        resid = (cs - C.unsqueeze(-1) * v).square().sum(-1)
        fvals = torch.stack([C, A + Bc + C, Bc + C, A + C], -1)
        fs = (A.abs() + Bc.abs() + C.abs()).unsqueeze(-1)
        cuts = (fvals > tol * fs).any(-1) & (fvals < -tol * fs).any(-1)
        line = ~nonpar & (torch.maximum(aa, bb) > tiny) & (resid <= tol**2 * scale2) & cuts
        lines.append(torch.stack([A, Bc, C], -1))
        isln.append(line)
        # closest points of the two segments (clamped least squares)
        aas, bbs = torch.where(aa > 0, aa, torch.ones_like(aa)), torch.where(bb > 0, bb, torch.ones_like(bb))
        tc = torch.where(nonpar, ts.clamp(0, 1), torch.zeros_like(ts))
        uc = (ab * tc + cb) / bbs
        tc = torch.where(uc < 0, (-ca / aas).clamp(0, 1), torch.where(uc > 1, ((ab - ca) / aas).clamp(0, 1), tc))
        uc = uc.clamp(0, 1)
        dist2 = (cs + tc.unsqueeze(-1) * al - uc.unsqueeze(-1) * be).square().sum(-1)
        near = (aa > 0) & (bb > 0) & ~point & ~line & (dist2 < _NEAR**2 * torch.maximum(aa, bb))
        near = near & (dist2 > tol**2 * scale2)
        pts[-1] = torch.where(near.unsqueeze(-1), torch.stack([tc, uc], -1), pts[-1])
        isnear.append(near)
        dists.append(torch.where(near, dist2.sqrt(), torch.zeros_like(dist2)))
        grams.append(torch.stack([aa, bb, ab], -1))
    return _Features(
        torch.stack(ispt, -1) | torch.stack(isnear, -1),
        torch.stack(pts, -2),
        torch.stack(isln, -1),
        torch.stack(lines, -2),
        torch.stack(isnear, -1),
        torch.stack(dists, -1),
        torch.stack(grams, -2),
        alphas,
        betas,
    )


def _corner_rules(
    c: Tensor, d1: Tensor, d2: Tensor, kinks: list[_Kink], orders: tuple[int, ...], tol: float
) -> tuple[Tensor, Tensor, Tensor, Tensor, _Features]:
    r"""Per-pair Duffy rules collapsed at a singular corner, with :math:`\eta`-panels at (near-)kinks.

    Corner :math:`\boldsymbol\kappa` with orientation :math:`\boldsymbol\sigma = 1 - 2\boldsymbol\kappa`:
    triangle 1 is :math:`(t, u) = \boldsymbol\kappa + \boldsymbol\sigma\odot(\xi, \xi\eta)`, triangle 2
    :math:`\boldsymbol\kappa + \boldsymbol\sigma\odot(\xi\eta, \xi)`, weight :math:`w_\xi w_\eta \xi`. For a kink
    singular at the corner the distance is :math:`r = \xi\rho_1(\eta)`, :math:`\rho_1(\eta) = \|\sigma_t
    \boldsymbol\alpha - \eta\sigma_u\boldsymbol\beta\|` (triangle 1; :math:`\|\eta\sigma_t\boldsymbol\alpha -
    \sigma_u\boldsymbol\beta\|` on triangle 2), smooth unless the paths are (nearly) parallel: then
    :math:`\rho` (nearly) vanishes at its minimiser :math:`\eta^* = \sigma_t\sigma_u\,\boldsymbol\alpha\cdot
    \boldsymbol\beta/\|\boldsymbol\beta\|^2`. Exactly parallel paths give the kink line :math:`t = cu` through
    the corner, where the :math:`\eta` range is split. Pairs whose features are not all at one corner, nearly
    parallel pairs (:math:`\rho_{\min}/\|\boldsymbol\beta\| <` ``_NEAR``, graded there) and near-misses are
    flagged ``special`` (weights zero here; see :func:`_special_pairs`).
    """
    feats = _pair_features(c, d1, d2, kinks, tol)
    corners = torch.tensor(_CORNERS, dtype=d1.dtype, device=d1.device)  # (4, 2)
    at_corner = ((feats.point.unsqueeze(-2) - corners).abs() <= tol).all(-1)  # (*B, P, M, 4)
    A, Bc, C = feats.line.unbind(-1)
    fvals = A.unsqueeze(-1) * corners[:, 0] + Bc.unsqueeze(-1) * corners[:, 1] + C.unsqueeze(-1)
    fs = (A.abs() + Bc.abs() + C.abs()).unsqueeze(-1)
    on_line = fvals.abs() <= tol * fs  # (*B, P, M, 4)
    sing = (feats.is_point.unsqueeze(-1) & at_corner) | (feats.is_line.unsqueeze(-1) & on_line)
    has = feats.is_point | feats.is_line  # (*B, P, M)
    allowed = torch.where(has.unsqueeze(-1), sing, torch.ones_like(sing)).all(-2)  # (*B, P, 4)
    zero_path = (d1.abs().amax(-1) == 0) | (d2.abs().amax(-1) == 0)
    special = (~allowed.any(-1) | feats.is_near.any(-1)) & ~zero_path
    kappa = torch.where(special | zero_path, torch.zeros_like(special, dtype=torch.long), allowed.long().argmax(-1))
    kt, ku = corners[kappa, 0], corners[kappa, 1]  # (*B, P)
    st, su = 1 - 2 * kt, 1 - 2 * ku
    sing_k = torch.gather(sing, -1, kappa[..., None, None].expand(*kappa.shape, sing.size(-2), 1))[..., 0]
    # parallel breakpoints per kink singular at the chosen corner; nearly parallel pairs go to the special path
    br1, br2 = [], []
    near_parallel = torch.zeros_like(special)
    for mi, (al, be) in enumerate(zip(feats.alpha, feats.beta, strict=True)):
        use = sing_k[..., mi] & ~special & ~zero_path
        sa, sb = st.unsqueeze(-1) * al, su.unsqueeze(-1) * be
        for first, second, store in ((sa, sb, br1), (sb, sa, br2)):
            # triangle 1: ρ(η) = |sa - η sb|; triangle 2: ρ(η) = |η sa - sb| = |sb - η sa|
            nn_ = second.square().sum(-1)
            eta = (first * second).sum(-1) / torch.where(nn_ > 0, nn_, torch.ones_like(nn_))
            rmin2 = (first - eta.unsqueeze(-1) * second).square().sum(-1)
            width = (rmin2 / torch.where(nn_ > 0, nn_, torch.ones_like(nn_))).sqrt()
            exact = rmin2 <= tol**2 * torch.maximum(first.square().sum(-1), nn_)
            inside = use & (nn_ > 0) & (eta > tol) & (eta < 1 - tol)
            near_parallel |= inside & ~exact & (width < _NEAR)
            store.append(torch.where(inside & exact, eta, torch.ones_like(eta)).unsqueeze(-1))
    special = special | near_parallel
    eta1 = torch.where(special.unsqueeze(-1), 1.0, torch.cat(br1, -1)).sort(-1).values
    eta2 = torch.where(special.unsqueeze(-1), 1.0, torch.cat(br2, -1)).sort(-1).values
    nb = max(int((eta1 < 1).sum(-1).max()), int((eta2 < 1).sum(-1).max())) if eta1.numel() else 0
    eta1, eta2 = eta1[..., :nb], eta2[..., :nb]
    Ts, Us, Ws = [], [], []
    for qi, q in enumerate(orders):
        xi, wxi = _gl(q, d1)
        for tri, eta in ((1, eta1), (2, eta2)):
            edges = torch.cat([eta.new_zeros(*eta.shape[:-1], 1), eta, eta.new_ones(*eta.shape[:-1], 1)], -1)
            length = edges[..., 1:] - edges[..., :-1]  # (*B, P, nb+1)
            en = (edges[..., :-1, None] + length[..., None] * xi).flatten(-2)  # (*B, P, (nb+1) q)
            we = (length[..., None] * wxi).flatten(-2)
            xcol = xi[:, None]
            tau = xcol.expand(q, en.size(-1)) if tri == 1 else xcol * en.unsqueeze(-2)
            nu = xcol * en.unsqueeze(-2) if tri == 1 else xcol.expand(q, en.size(-1))
            w = (wxi[:, None] * xi[:, None]) * we.unsqueeze(-2)
            t = kt[..., None, None] + st[..., None, None] * tau
            u = ku[..., None, None] + su[..., None, None] * nu
            Ts.append(t.flatten(-2))
            Us.append(u.flatten(-2))
            Ws.append((qi, w.flatten(-2)))
    T, U = torch.cat(Ts, -1), torch.cat(Us, -1)
    W = T.new_zeros(len(orders), *T.shape)
    off = 0
    for qi, w in Ws:
        W[qi, ..., off : off + w.size(-1)] = w
        off += w.size(-1)
    W = W * (~special).unsqueeze(-1)
    return T, U, W, special, feats


def _pair_radial(
    radial: tuple[Kernel, Tensor | None, Tensor | None],
    c: Tensor,
    d1: Tensor,
    d2: Tensor,
    T: Tensor,
    U: Tensor,
    W: Tensor,
) -> Tensor:
    r"""Fast IG-pair block of a scaled radial leaf:
    :math:`\sum_n w_n \partial_i\partial'_j k = -\frac{\sigma^2}{\ell_i\ell_j}\big[\sum_n w_n\omega_n z_{ni}z_{nj}
    + \delta_{ij}\sum_n w_n\gamma_n\big]`, :math:`\mathbf z_n = (\mathbf c + t_n\boldsymbol\alpha -
    u_n\boldsymbol\beta)/\boldsymbol\ell`."""
    leaf, dims, scale = radial
    full = d1.size(-1)
    if dims is not None:
        c, d1, d2 = c.index_select(-1, dims), d1.index_select(-1, dims), d2.index_select(-1, dims)
    ls = _row(leaf.lengthscale, 1)  # (*kb, 1, c)
    z = (c.unsqueeze(-2) + T.unsqueeze(-1) * d1.unsqueeze(-2) - U.unsqueeze(-1) * d2.unsqueeze(-2)) / ls.unsqueeze(-2)
    s = z.square().sum(-1)
    _, gamma, omega = _radial_profile(leaf, s, 2, 2, value=False)
    zz = torch.einsum("R...pn,...pni,...pnj->R...pij", W * omega, z, z)
    gsum = (W * gamma).sum(-1)
    eye = torch.eye(z.size(-1), dtype=z.dtype, device=z.device)
    lsl = ls.unsqueeze(-1) * ls.unsqueeze(-2)  # (*kb, 1, c, c)
    res = -(zz + gsum[..., None, None] * eye) / lsl
    if scale is not None:
        res = res * scale.reshape(*scale.shape, 1, 1, 1)
    if dims is None:
        return res
    res = res.new_zeros(*res.shape[:-2], full, res.size(-1)).index_add(-2, dims, res)
    return res.new_zeros(*res.shape[:-1], full).index_add(-1, dims, res)


# ------------------------------------------------------------------------------------------------ special pairs
def _split_poly(poly: list[tuple[float, float]], coef: tuple[float, float, float], eps: float) -> list[list]:
    """Split a convex polygon by the line ``A t + B u + C = 0``."""
    A, B, C = coef
    vals = [A * t + B * u + C for t, u in poly]
    if all(v >= -eps for v in vals) or all(v <= eps for v in vals):
        return [poly]
    pos: list[tuple[float, float]] = []
    neg: list[tuple[float, float]] = []
    for i, (p, v) in enumerate(zip(poly, vals, strict=True)):
        q, w = poly[(i + 1) % len(poly)], vals[(i + 1) % len(poly)]
        if v >= -eps:
            pos.append(p)
        if v <= eps:
            neg.append(p)
        if (v > eps and w < -eps) or (v < -eps and w > eps):
            lam = v / (v - w)
            x = (p[0] + lam * (q[0] - p[0]), p[1] + lam * (q[1] - p[1]))
            pos.append(x)
            neg.append(x)
    return [pp for pp in (pos, neg) if len(pp) >= 3 and _area(pp) > eps * eps]


def _area(poly: Sequence[tuple[float, float]]) -> float:
    nxt = [*poly[1:], poly[0]]
    return 0.5 * abs(sum(p[0] * q[1] - q[0] * p[1] for p, q in zip(poly, nxt, strict=True)))


def _contains(poly: Sequence[tuple[float, float]], pt: tuple[float, float], eps: float) -> bool:
    sign = 0.0
    for i in range(len(poly)):
        p, q = poly[i], poly[(i + 1) % len(poly)]
        cr = (q[0] - p[0]) * (pt[1] - p[1]) - (q[1] - p[1]) * (pt[0] - p[0])
        if abs(cr) <= eps:
            continue
        if sign == 0.0:
            sign = cr
        elif cr * sign < 0:
            return False
    return True


def _on_segment(p: tuple, q: tuple, pt: tuple, eps: float) -> bool:
    cr = (q[0] - p[0]) * (pt[1] - p[1]) - (q[1] - p[1]) * (pt[0] - p[0])
    if abs(cr) > eps:
        return False
    dot = (pt[0] - p[0]) * (q[0] - p[0]) + (pt[1] - p[1]) * (q[1] - p[1])
    return -eps <= dot <= (q[0] - p[0]) ** 2 + (q[1] - p[1]) ** 2 + eps


def _triangulate(points: list[tuple[float, float]], lines: list[tuple[float, float, float]], eps: float) -> list:
    """Triangles ``((apex, v1, v2), point index or None)`` covering the unit square, with kink lines as edges and
    singular points as apices (Duffy collapse vertices)."""
    polys: list[tuple[list, int | None]] = [([(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)], None)]
    for coef in lines:
        norm = math.hypot(coef[0], coef[1])
        if norm == 0:
            continue
        unit = (coef[0] / norm, coef[1] / norm, coef[2] / norm)
        polys = [(pp, None) for poly, _ in polys for pp in _split_poly(poly, unit, eps)]
    for pi, pt in enumerate(points):
        new = []
        for poly, apex in polys:
            if apex is None and _contains(poly, pt, eps):
                for i in range(len(poly)):
                    p, q = poly[i], poly[(i + 1) % len(poly)]
                    if not _on_segment(p, q, pt, eps):
                        tri = [pt, p, q]
                        if _area(tri) > eps * eps:
                            new.append((tri, pi))
            else:
                new.append((poly, apex))
        polys = new
    tris = []
    for poly, apex in polys:
        if apex is not None:
            tris.append((tuple(poly), apex))
        else:
            for i in range(1, len(poly) - 1):
                tri = (poly[0], poly[i], poly[i + 1])
                if _area(tri) > eps * eps:
                    tris.append((tri, None))
    return tris


def _graded_np(center: float, width: float, lo_only: bool = False) -> list[float]:
    """Breakpoints in (0, 1) at ``center`` and ``center ± width 4^j`` (only ``+`` if ``lo_only``)."""
    out = [center]
    if width > 0:
        for j in range(_GRADE_STEPS):
            step = width * 4.0**j
            out.append(center + step)
            if not lo_only:
                out.append(center - step)
    return sorted(p for p in out if 1e-12 < p < 1 - 1e-12)


def _panel_rule(breaks: list[float], order: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite GL on [0, 1] with panels at ``breaks``."""
    xi, w = _gl_np(order)
    edges = np.array([0.0, *breaks, 1.0])
    lengths = np.diff(edges)
    nodes = (edges[:-1, None] + lengths[:, None] * xi).ravel()
    weights = (lengths[:, None] * w).ravel()
    return nodes, weights


def _triangle_nodes(tris: list, order: int, info: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Collapsed GL on triangles :math:`(V_0, V_1, V_2)`: :math:`V_0 + \xi(V_1 - V_0) + \xi\eta(V_2 - V_1)`,
    Jacobian :math:`\xi|\det(V_1 - V_0, V_2 - V_1)|`.

    If the apex is a (near-)singular point with distance :math:`d` and Gram matrix :math:`G` (``info``), the
    distance is :math:`r^2 = d^2 + \xi^2\rho(\eta)^2`, :math:`\rho(\eta)^2 = \mathbf e(\eta)^\top G\,\mathbf
    e(\eta)`: :math:`\eta` is split and graded around the minimiser of :math:`\rho` when that is small (nearly
    parallel paths), :math:`\xi` graded from the apex at :math:`d/\rho_{\min}` when :math:`d > 0`.
    """
    ts, us, ws = [], [], []
    for (v0, v1, v2), apex in tris:
        v0, v1, v2 = np.asarray(v0), np.asarray(v1), np.asarray(v2)
        e1, e2 = v1 - v0, v2 - v1
        jac = abs(e1[0] * e2[1] - e1[1] * e2[0])
        eta_breaks: list[float] = []
        xi_breaks: list[float] = []
        if apex is not None:
            dist, gram = info[apex]
            g = np.array([[gram[0], -gram[2]], [-gram[2], gram[1]]])  # (t, u) -> α t - β u

            def rho2(eta: float, g: np.ndarray = g, e1: np.ndarray = e1, e2: np.ndarray = e2) -> float:
                e = e1 + eta * e2
                return float(e @ g @ e)

            a2 = float(e2 @ g @ e2)
            lo = min(rho2(0.0), rho2(1.0))
            if a2 > 0:
                eta_star = -float(e1 @ g @ e2) / a2
                if 0.0 < eta_star < 1.0:
                    rmin2 = max(rho2(eta_star), 0.0)
                    lo = min(lo, rmin2)
                    width = math.sqrt(rmin2 / a2)
                    if width < _NEAR:
                        eta_breaks = _graded_np(eta_star, width)
            if dist > 0 and lo > 0:
                xi_breaks = _graded_np(0.0, dist / math.sqrt(lo), lo_only=True)
        xn, xw = _panel_rule(xi_breaks, order)
        en, ew = _panel_rule(eta_breaks, order)
        X, E = np.meshgrid(xn, en, indexing="ij")
        WW = np.outer(xw, ew) * X * jac
        ts.append((v0[0] + X * e1[0] + X * E * e2[0]).ravel())
        us.append((v0[1] + X * e1[1] + X * E * e2[1]).ravel())
        ws.append(WW.ravel())
    return np.concatenate(ts), np.concatenate(us), np.concatenate(ws)


def _special_pairs(
    term: _Term,
    method: str,
    res: Tensor,
    special: Tensor,
    feats: _Features,
    start1: Tensor,
    start2: Tensor,
    d1: Tensor,
    d2: Tensor,
    orders: tuple[int, ...],
    block_size: int,
) -> None:
    """Integrate pairs with interior crossings / non-corner kink lines on an explicit triangulation (in place)."""
    nbat = d1.dim() - 2
    bshape = d1.shape[:nbat]
    dims = d1.size(-1)
    sidx = special.nonzero(as_tuple=True)
    owner = _flat_owner(sidx[:nbat], bshape, sidx[0].numel(), d1.device)
    pidx = sidx[nbat]
    is_pt, pts = feats.is_point[sidx].cpu().numpy(), feats.point[sidx].cpu().double().numpy()
    is_ln, lns = feats.is_line[sidx].cpu().numpy(), feats.line[sidx].cpu().double().numpy()
    dist, gram = feats.dist[sidx].cpu().double().numpy(), feats.gram[sidx].cpu().double().numpy()
    nodes_t, nodes_u, nodes_w, own = [], [], [], []
    for i in range(owner.numel()):
        keep = [j for j in range(pts.shape[1]) if is_pt[i, j]]
        points = [tuple(pts[i, j]) for j in keep]
        info = [(float(dist[i, j]), gram[i, j]) for j in keep]
        lines = [tuple(lns[i, j]) for j in range(lns.shape[1]) if is_ln[i, j]]
        tris = _triangulate(points, lines, 1e-12)
        tl, ul, wl = [], [], []
        for ri, q in enumerate(orders):
            t, u, w = _triangle_nodes(tris, q, info)
            wr = np.zeros((len(orders), t.size))
            wr[ri] = w
            tl.append(t)
            ul.append(u)
            wl.append(wr)
        nodes_t.append(np.concatenate(tl))
        nodes_u.append(np.concatenate(ul))
        nodes_w.append(np.concatenate(wl, axis=1))
        own.append(np.full(nodes_t[-1].size, i))
    T = torch.as_tensor(np.concatenate(nodes_t), dtype=d1.dtype, device=d1.device)
    U = torch.as_tensor(np.concatenate(nodes_u), dtype=d1.dtype, device=d1.device)
    Wn = torch.as_tensor(np.concatenate(nodes_w, axis=1), dtype=d1.dtype, device=d1.device)  # (R, N)
    which = torch.as_tensor(np.concatenate(own), dtype=torch.long, device=d1.device)
    d1f = d1.reshape(-1, *d1.shape[nbat:])[owner, pidx]  # (Ns, D)
    d2f = d2.reshape(-1, *d2.shape[nbat:])[owner, pidx]
    acc = res.new_zeros(len(orders), owner.numel(), dims, dims)
    for c0, c1 in _chunks(T.numel(), 8 * dims * dims * max(1, _numel(bshape)), block_size):
        wi = which[c0:c1]
        a1 = start1[pidx[wi]] + T[c0:c1, None] * d1f[wi]
        a2 = start2[pidx[wi]] + U[c0:c1, None] * d2f[wi]
        h = _owner_eval(
            lambda x1, x2, npd: term.derivs(x1, x2, npd, 2, method),
            a1.unsqueeze(1),
            a2.unsqueeze(1),
            owner[wi],
            bshape,
        ).h[:, 0]  # (Nc, D, D)
        for R in range(len(orders)):
            acc[R].index_add_(0, wi, Wn[R, c0:c1, None, None] * h)
    acc = acc * (d1f.unsqueeze(-1) * d2f.unsqueeze(-2))
    res[(slice(None), *sidx)] = acc
