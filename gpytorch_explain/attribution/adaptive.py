#!/usr/bin/env python3
r"""Adaptive Gauss–Legendre order for integrated-gradient attribution GPs.

Kernels without closed-form path integrals (periodic, Matérn, RQ, products, user kernels, the autograd fallback)
integrate along the path by Gauss–Legendre quadrature. A fixed order can be far off: a trained
``ScaleKernel(PeriodicKernel())`` with period 0.65 and lengthscale 0.26 oscillates along a path several periods
long, and order 32 gave stds of [4.56, 7.11, 6.41] against [3.92, 5.08, 4.91] at order 1024. With ``order=None``
(the default of :class:`~gpytorch_explain.PosteriorIntegratedGradients`) the attribution GP is computed at orders
:math:`q = 32, 64, \dots` until two successive orders agree,

.. math::

    \max_{p,i} \frac{|\mu^{(2q)}_{pi} - \mu^{(q)}_{pi}| + |\sigma^{(2q)}_{pi} - \sigma^{(q)}_{pi}|}{s_p}
    \le \mathrm{rtol}, \qquad s_p = \max_i \max(|\mu^{(2q)}_{pi}|, \sigma^{(2q)}_{pi}),

(Gauss–Legendre converges geometrically for analytic integrands, so the order-:math:`2q` result, which is
returned, is then far more accurate than the difference), up to :data:`MAX_ORDER`; beyond it a
:class:`QuadratureWarning` gives the numbers. An explicit ``order=`` is used as given.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import AutogradFallbackWarning, QuadratureWarning  # noqa: F401 (re-exported)

__all__ = [
    "AutogradFallbackWarning",
    "QuadratureWarning",
    "QUADRATURE_RTOL",
    "MAX_ORDER",
    "adaptive_call",
    "check_order",
]

#: relative tolerance of the adaptive order (relative to each point's attribution scale)
QUADRATURE_RTOL = 1e-4
#: largest order the adaptive rule tries
MAX_ORDER = 1024


def check_order(order) -> int:
    """Validate an explicit Gauss–Legendre order."""
    if isinstance(order, bool) or int(order) != order or order < 1:
        raise ValueError(f"order must be a positive integer (or None for the adaptive default), got {order!r}.")
    return int(order)


def _moments(dist) -> tuple[Tensor, Tensor]:
    with torch.no_grad():
        return dist.mean.detach(), dist.variance.detach().clamp_min(0).sqrt()


def adaptive_call(
    fn: Callable[[Tensor, int], object],
    x: Tensor,
    start: int,
    where: str = "PosteriorIntegratedGradients",
    rtol: float | None = None,
    max_order: int | None = None,
):
    """``fn(x, q)`` at doubling orders from ``start`` until converged (see the module docs); ``(result, order)``."""
    rtol = QUADRATURE_RTOL if rtol is None else rtol
    max_order = MAX_ORDER if max_order is None else max_order
    order = int(start)
    prev = fn(x, order)
    pm, ps = _moments(prev)
    err_rel = float("inf")
    while order < max_order:
        order = min(2 * order, max_order)
        cur = fn(x, order)
        cm, cs = _moments(cur)
        tiny = torch.finfo(cm.dtype).tiny
        scale = torch.maximum(cm.abs(), cs).amax(-1, keepdim=True).clamp_min(tiny)
        err = (cm - pm).abs() + (cs - ps).abs()
        err_rel = float((err / scale).max())
        if err_rel <= rtol:
            return cur, order
        prev, pm, ps = cur, cm, cs
    warnings.warn(
        f"{where}: the quadrature did not converge: at order {order} the attributions still change by up to "
        f"{err_rel:.3g} (relative to each point's attribution scale; tolerance {rtol:g}) against order "
        f"{order // 2}. Results at order {order} are returned; check them with quadrature_error(x), move the "
        "baseline closer, or pass a larger explicit order=.",
        QuadratureWarning,
        stacklevel=3,
    )
    return prev, order
