#!/usr/bin/env python3
r"""The finite-difference stencil of ``LocalGPExplainer``: which design, its rows, and its direct slope readings.

With :math:`h_i = \delta r\sigma_i` (``δ`` in box half-widths, ``r`` the interval), the stencil adds rows next to
the instance on every perturbed continuous feature ``i`` to the first black-box call:

* central: :math:`\mathbf x + h_i\mathbf e_i` and :math:`\mathbf x - h_i\mathbf e_i` (2 rows per feature, in feature
  order, ``+`` first); the difference :math:`d_i = (f(\mathbf x + h_i\mathbf e_i) - f(\mathbf x - h_i\mathbf e_i))/2h_i`
  is the slope at ``x`` up to :math:`O(h_i^2 f^{(3)})`;
* forward: :math:`\mathbf x + h_i\mathbf e_i` (1 row per feature);
  :math:`d_i = (f(\mathbf x + h_i\mathbf e_i) - f(\mathbf x))/h_i` is the slope up to :math:`O(h_i f'')`.

``stencil="auto"`` takes :data:`AUTO_STENCIL` and the central design when it takes at most
:data:`AUTO_STENCIL_SHARE` of the budget, else the forward design when it takes at most :data:`AUTO_FORWARD_SHARE`,
each only if at least 1 call is left to the acquisition after ``x`` and the Sobol points (as for a stencil given
as a number; at least 2 until 2026-11-30, which left the issue's toy black box, 10 features, without a stencil at
15 calls: true slopes up to 18 stds off, none beyond 0.9 with it).

Example:
    >>> from gpytorch_explain.local.stencil import choose_stencil
    >>> choose_stencil("auto", "auto", n_cont=30, budget=50, n_initial=10)[:2]  # 60 central rows do not fit
    (0.1, 'forward')
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "AUTO_FORWARD_SHARE",
    "AUTO_STENCIL",
    "AUTO_STENCIL_SHARE",
    "STENCIL_KINDS",
    "choose_stencil",
    "stencil_differences",
    "stencil_rows",
]

#: the stencil half-width (box half-widths) that ``stencil="auto"`` uses
AUTO_STENCIL = 0.1
#: ``stencil="auto"`` uses the central stencil when its rows take at most this share of the budget
AUTO_STENCIL_SHARE = 0.5
#: ... and otherwise the forward stencil (half the rows) when its rows take at most this share
AUTO_FORWARD_SHARE = 2.0 / 3.0
#: the stencil designs (``LocalGPExplainer(stencil_kind=...)``)
STENCIL_KINDS = ("auto", "central", "forward")
_SHARE = {"central": AUTO_STENCIL_SHARE, "forward": AUTO_FORWARD_SHARE}


def _rows(kind: str, n_cont: int) -> int:
    return 2 * n_cont if kind == "central" else n_cont


def choose_stencil(
    stencil: float | str | None, stencil_kind: str, n_cont: int, budget: int, n_initial: int
) -> tuple[float | None, str, str | None]:
    """``(half-width or None, design, why "auto" left it off or None)`` for ``n_cont`` perturbed continuous features.

    A number ``stencil`` is checked (in (0, 1], a continuous feature to perturb, room for ``x``, the stencil, the
    Sobol points and one BO step) and raises ``ValueError`` otherwise; ``"auto"`` never raises for the budget.
    """
    if stencil_kind not in STENCIL_KINDS:
        raise ValueError(f"stencil_kind must be one of {STENCIL_KINDS}, got {stencil_kind!r}.")
    kinds = ("central", "forward") if stencil_kind == "auto" else (stencil_kind,)
    if isinstance(stencil, str):
        if stencil != "auto":
            raise ValueError(f"stencil must be 'auto', None or a half-width in (0, 1], got {stencil!r}.")
        for kind in kinds:
            rows = _rows(kind, n_cont)
            if 0 < rows <= _SHARE[kind] * budget and budget - (1 + rows + n_initial) >= 1:
                return AUTO_STENCIL, kind, None
        if n_cont == 0:
            return None, stencil_kind, None
        last = kinds[-1]
        why = (
            f"the {last} stencil's {_rows(last, n_cont)} rows are more than {_SHARE[last]:.3g} of budget = {budget}, "
            f"or leave no call to the acquisition after x and the {n_initial} Sobol points"
        )
        return None, stencil_kind, why
    if stencil is None:
        return None, stencil_kind, None
    if isinstance(stencil, (bool, np.bool_)) or not isinstance(stencil, numbers.Real):
        raise TypeError(f"stencil must be 'auto', None or a half-width in (0, 1], got {stencil!r}.")
    stencil = float(stencil)
    if not (0.0 < stencil <= 1.0):
        raise ValueError(f"stencil must be 'auto', None or a half-width in (0, 1] box half-widths, got {stencil}.")
    if n_cont == 0:
        raise ValueError("stencil needs a perturbed continuous feature; every one here is categorical.")
    for kind in kinds:
        if budget >= _rows(kind, n_cont) + n_initial + 2:
            return stencil, kind, None
    kind = kinds[-1]
    raise ValueError(
        f"budget = {budget} is smaller than the initial design with a stencil: x + {_rows(kind, n_cont)} {kind} "
        f"stencil points + n_initial = {n_initial} Sobol points + at least one BO step need "
        f"budget >= {_rows(kind, n_cont) + n_initial + 2}."
    )


def stencil_rows(stencil: float, kind: str, d: int, positions: Sequence[int], dtype=torch.float64) -> Tensor:
    """The stencil's rows in box units (the instance at the origin): ``(2k, d)`` central or ``(k, d)`` forward."""
    positions = list(positions)
    if kind == "forward":
        return stencil * torch.eye(d, dtype=dtype)[positions]
    U = torch.zeros(2 * len(positions), d, dtype=dtype)
    for k, p in enumerate(positions):
        U[2 * k, p], U[2 * k + 1, p] = stencil, -stencil
    return U


def stencil_differences(y: np.ndarray, kind: str, h: np.ndarray) -> np.ndarray:
    """The finite differences :math:`d_i` from the black box's outputs ``y`` (``y[0]`` at ``x``, then the stencil's
    rows as :func:`stencil_rows` orders them) and the user-unit steps ``h`` (one per stenciled feature)."""
    h = np.asarray(h, dtype=np.float64)
    k = h.size
    if kind == "forward":
        return (y[1 : 1 + k] - y[0]) / h
    return (y[1 : 1 + 2 * k : 2] - y[2 : 2 + 2 * k : 2]) / (2.0 * h)


def completion_message(names: Sequence[str], every: bool) -> str:
    r"""``result.warnings``' line for the forward stencil completed at :math:`\mathbf x - \delta r\sigma_j\mathbf e_j`
    for the features ``names`` (``every``: all stenciled features; else the calls sufficed for only these)."""
    return (
        f"stencil completion: {len(names)} call(s) at x - δ·rσ e_j made the forward difference central for "
        f"{', '.join(names[:5])}{', ...' if len(names) > 5 else ''} "
        + (
            "(every stenciled feature)"
            if every
            else "(too few calls for every stenciled feature: those where the forward difference's truncation "
            "estimate or its gap to the surrogate's slope exceeded that slope's std)"
        )
    )
