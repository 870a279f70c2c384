#!/usr/bin/env python3
r"""A probe for kernels and posteriors that autograd can differentiate but whose process has no gradient.

Autograd differentiates a covariance's formula, which can be differentiable away from :math:`\mathbf x = \mathbf x'`
while the process is not: for the Laplace kernel :math:`e^{-\|\mathbf x - \mathbf x'\|_1/\ell}` autograd gives
:math:`\partial_i\partial'_i k = 0` at coincident inputs (and :math:`-k/\ell^2` beside them), where the gradient's
prior variance is infinite; the attribution covariances then come out negative and are clamped to zero, a
confident wrong answer. The probe reads the gradient's variance as the second difference

.. math::
    V_i(\delta) = \bigl[\Sigma(\mathbf x + \delta\mathbf e_i, \mathbf x + \delta\mathbf e_i)
    - \Sigma(\mathbf x + \delta\mathbf e_i, \mathbf x) - \Sigma(\mathbf x, \mathbf x + \delta\mathbf e_i)
    + \Sigma(\mathbf x, \mathbf x)\bigr] / \delta^2

at steps divided by 4 per level. It converges for a mean-square differentiable covariance and grows like
:math:`1/\delta` (a ratio of 4 per level) for one like Matérn-1/2's. Two successive ratios in [3, 6] at the
smallest steps are the signature: a smooth covariance whose lengthscale is below the steps gives ratios near 16 that
fall towards 1 through at most one ratio in that range. Float64 only (float32 round-off swamps the smallest steps).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import KernelNotDifferentiableError

__all__ = ["check_mean_square_differentiable"]

#: the probe's first step, as a fraction of the per-dimension scale, and its number of levels (each step / 4)
_PROBE_START, _PROBE_LEVELS = 0.1, 7


def check_mean_square_differentiable(cov: Callable[[Tensor], Tensor], x: Tensor, scales: Tensor, name: str) -> None:
    """Raise :class:`KernelNotDifferentiableError` when the covariance ``cov`` has no gradient process at ``x``.

    :param cov: ``R (d + 1, d) -> (..., d + 1, d + 1)``: the covariance among the rows of ``R``.
    :param x: the probe point ``(d,)``.
    :param scales: per-dimension step scales ``(d,)`` (0: not probed).
    :param name: what the message calls the covariance.
    """
    if x.dtype != torch.float64:
        return
    d = x.numel()
    values = []
    with torch.no_grad():
        for level in range(_PROBE_LEVELS):
            steps = _PROBE_START * scales.to(x) / 4.0**level
            R = torch.cat([x.reshape(1, d), x.reshape(1, d) + torch.diag(steps)])
            M = cov(R).reshape(-1, d + 1, d + 1)
            diag = M.diagonal(dim1=-2, dim2=-1)
            safe = torch.where(steps > 0, steps, torch.ones_like(steps))
            values.append((diag[:, 1:] - M[:, 1:, 0] - M[:, 0, 1:] + diag[:, :1]) / safe**2)
    V = torch.stack(values)  # (levels, batch, d)
    if not torch.isfinite(V).all():
        return  # non-finite derivatives are reported where they are taken
    prev = V[:-1].where(V[:-1].abs() > 0, torch.ones_like(V[:-1]))
    last = (V[1:] / prev)[-2:]
    grows = ((last >= 3.0) & (last <= 6.0)).all(0) & (V[-1] > 0) & (scales > 0)
    if grows.any():
        b, i = (int(v) for v in grows.nonzero()[0])
        readings = ", ".join(f"{float(V[k, b, i]):.3g}" for k in range(-3, 0))
        raise KernelNotDifferentiableError(
            f"{name} is not mean-square differentiable at x = x' (the process has no gradient): along input {i} the "
            f"gradient's variance, read as a second difference of the covariance, grows like 1/step ({readings} at "
            "steps divided by 4), while autograd's formula gives a finite value, so the gradient and IG covariances "
            "would be wrong (clamped to zero). Kernels like Matérn-1/2 or the Laplace kernel have no gradient GP; "
            "use a twice-differentiable kernel (RBF, Matérn-3/2 or 5/2, RQ)."
        )
