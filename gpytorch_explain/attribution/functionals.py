#!/usr/bin/env python3
r"""Linear functionals of a GP whose posteriors are themselves GPs: gradients and integrated gradients."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["GradientFunctional", "IntegratedGradientFunctional", "Functional"]


@dataclass(frozen=True)
class GradientFunctional:
    r"""The gradient :math:`\partial f(\mathbf x) / \partial x_i`, :math:`i = 1..D`."""

    def path_delta(self, x: Tensor) -> Tensor:  # pragma: no cover - not a path functional
        raise TypeError("GradientFunctional is not a path functional.")


@dataclass(frozen=True, eq=False)
class IntegratedGradientFunctional:
    r"""Integrated gradients with baseline(s) :math:`\mathbf b^{(1..k)}`, averaged over the baselines.

    .. math::

        \mathrm{IG}_i f(\mathbf x) = \frac1k \sum_{r=1}^{k} (x_i - b^{(r)}_i)
        \int_0^1 \partial_i f\big(\mathbf b^{(r)} + t(\mathbf x - \mathbf b^{(r)})\big)\, dt .

    With one baseline this is Sundararajan et al.'s IG; with several, the expected IG over a
    uniform distribution on them. Completeness: :math:`\sum_i \mathrm{IG}_i f(\mathbf x)
    = f(\mathbf x) - \frac1k\sum_r f(\mathbf b^{(r)})`.

    :param baselines: ``(k, D)`` (a ``(D,)`` tensor is one baseline).
    """

    baselines: Tensor

    def __post_init__(self):
        b = self.baselines
        if b.dim() == 1:
            object.__setattr__(self, "baselines", b.unsqueeze(0))
        elif b.dim() != 2:
            raise ValueError(f"baselines must be (D,) or (k, D), got shape {tuple(b.shape)}.")

    @property
    def num_baselines(self) -> int:
        return self.baselines.size(0)


Functional = GradientFunctional | IntegratedGradientFunctional


def check_point_tensor(x) -> None:
    """``x`` must be a floating-point tensor of points ``(m, D)`` or ``(*batch, m, D)``."""
    if not torch.is_tensor(x):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}.")
    if x.dim() < 2:
        raise ValueError(f"x must be (m, D) (or batched (..., m, D)), got shape {tuple(x.shape)}.")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}.")


def check_inputs(x: Tensor, dims: int) -> None:
    if x.size(-1) != dims:
        raise ValueError(f"x has {x.size(-1)} columns but the functional expects D = {dims}.")
    if not torch.isfinite(x).all():
        raise ValueError("x contains NaN or infinite values.")


def __getattr__(name: str):
    from .._deprecation import resolve_deprecated

    return resolve_deprecated(__name__, name, ("Gradient", "IntegratedGradient"), globals().__getitem__)
