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
the derivatives for any kernel built from

* **closed-form leaves** — ``RBFKernel``, ``RQKernel``, ``MaternKernel`` (:math:`\nu = 3/2, 5/2`),
  ``PeriodicKernel``, ``LinearKernel``, ``ConstantKernel`` (isotropic or ARD, any ``active_dims``, batched);
* **structure** — ``ScaleKernel``, sums (``AdditiveKernel``, ``k1 + k2``; linearity) and ``ProductKernel``
  (``k1 * k2``; product rule
  :math:`\partial_i\partial'_j(k_1k_2) = (\partial_i\partial'_j k_1)k_2 + \partial_i k_1\,\partial'_j k_2
  + \partial'_j k_1\,\partial_i k_2 + k_1\,\partial_i\partial'_j k_2`);
* **any other kernel** (user-defined ``Kernel`` subclasses, ...) — plain torch autograd of the kernel's
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

The path integrals of these derivatives (integrated gradients) are in
:mod:`gpytorch_explain.attribution.path_integrals`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from gpytorch.kernels import (
    Kernel,
)
from torch import Tensor

from ..errors import KernelNotDifferentiableError
from ..settings import block_budget
from ._derivative_leaves import _Derivs, _derivs
from ._quadrature import chunk_slices, numel
from .functionals import IntegratedGradientFunctional, check_inputs

__all__ = [
    "KernelNotDifferentiableError",
    "default_block_size",
    "grad_cross",
    "grad_joint",
    "grad_point",
    "kernel_derivatives",
]

#: Element budget of the largest temporaries of one block at the default ``max_block_elements`` (kept for import
#: compatibility; the live default is :func:`default_block_size`, ``max_block_elements // 2``).
DEFAULT_BLOCK = 1 << 23


def default_block_size(block_size: int | None = None) -> int:
    """``block_size``, or when ``None`` the element budget of one block read from
    :class:`gpytorch_explain.settings.max_block_elements` at call time (half of it: :math:`2^{23}` by default)."""
    return block_budget("kernel_derivative_block") if block_size is None else int(block_size)


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


def _as_baselines(baselines: Tensor | IntegratedGradientFunctional, like: Tensor) -> Tensor:
    if isinstance(baselines, IntegratedGradientFunctional):
        baselines = baselines.baselines
    b = torch.as_tensor(baselines, dtype=like.dtype, device=like.device)
    if b.dim() == 1:
        b = b.unsqueeze(0)
    if b.dim() != 2 or b.size(0) == 0:
        raise ValueError(f"baselines must be (D,) or (k, D) with k >= 1, got shape {tuple(b.shape)}.")
    check_inputs(b, like.size(-1))
    return b


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
        t = t.reshape(numel(bshape), *t.shape[nb:])
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
        :math:`h_{ij} = \partial^2 k/\partial x_i\partial x'_j` (trailing ``D`` / ``D × D``).
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


def grad_cross(kernel: Kernel, x: Tensor, X: Tensor, *, method: str = "auto", block_size: int | None = None) -> Tensor:
    r""":math:`\operatorname{Cov}(\partial_i f(\mathbf x_p), f(\mathbf X_j)) = \partial_i k(\mathbf x_p, \mathbf
    X_j)`, ``(*batch, m, D, n)``.

    :param method: ``"auto"`` (closed forms for supported leaves, autograd otherwise) or ``"autograd"`` (autograd
        for every leaf; a diagnostic — not valid at coincident points for GPyTorch's distance-based kernels).
    """
    _check_method(method)
    block_size = default_block_size(block_size)
    bshape, (x, X) = _setup(kernel, x, X)
    m, dims, n = x.size(-2), x.size(-1), X.size(-2)
    out = x.new_zeros(*bshape, m, dims, n)
    for chunk in chunk_slices(m, 4 * n * dims * numel(bshape), block_size):
        p0, p1 = chunk.start, chunk.stop
        g1 = _derivs(kernel, x[..., p0:p1, None, :], X.unsqueeze(-3), 2, 1, method).g1
        out[..., p0:p1, :, :] = g1.expand(*bshape, p1 - p0, n, dims).transpose(-1, -2)
    return out


def grad_joint(
    kernel: Kernel, x1: Tensor, x2: Tensor, *, method: str = "auto", block_size: int | None = None
) -> Tensor:
    r""":math:`\operatorname{Cov}(\partial_i f(\mathbf x_p), \partial_j f(\mathbf x'_q)) = \partial_i\partial'_j
    k(\mathbf x_p, \mathbf x'_q)`, ``(*batch, m1, D, m2, D)``.

    Exact at coincident points (closed forms, e.g. :math:`\sigma^2\tfrac53\delta_{ij}/\ell_i^2` for Matérn-5/2).
    """
    _check_method(method)
    block_size = default_block_size(block_size)
    bshape, (x1, x2) = _setup(kernel, x1, x2)
    m1, dims, m2 = x1.size(-2), x1.size(-1), x2.size(-2)
    out = x1.new_zeros(*bshape, m1, dims, m2, dims)
    for chunk in chunk_slices(m1, 6 * m2 * dims * dims * numel(bshape), block_size):
        p0, p1 = chunk.start, chunk.stop
        h = _derivs(kernel, x1[..., p0:p1, None, :], x2.unsqueeze(-3), 2, 2, method).h
        out[..., p0:p1, :, :, :] = h.expand(*bshape, p1 - p0, m2, dims, dims).transpose(-2, -3)
    return out


def grad_point(kernel: Kernel, x: Tensor, *, method: str = "auto", block_size: int | None = None) -> Tensor:
    r""":math:`\operatorname{Var}`-blocks :math:`\partial_i\partial'_j k(\mathbf x_p, \mathbf x_p)`,
    ``(*batch, m, D, D)``."""
    _check_method(method)
    block_size = default_block_size(block_size)
    bshape, (x,) = _setup(kernel, x)
    m, dims = x.size(-2), x.size(-1)
    out = x.new_zeros(*bshape, m, dims, dims)
    for chunk in chunk_slices(m, 6 * dims * dims * numel(bshape), block_size):
        p0, p1 = chunk.start, chunk.stop
        xs = x[..., p0:p1, :]
        out[..., p0:p1, :, :] = _derivs(kernel, xs, xs, 1, 2, method).h.expand(*bshape, p1 - p0, dims, dims)
    return out
