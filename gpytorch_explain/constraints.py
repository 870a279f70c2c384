#!/usr/bin/env python3
r"""Constraints for positive hyperparameters that never underflow to exactly zero."""

from __future__ import annotations

import torch
from gpytorch.constraints import Positive
from torch import Tensor

__all__ = ["FlooredPositive"]


class FlooredPositive(Positive):
    r"""``Positive`` (softplus) with a floor of the dtype's smallest normal number.

    .. math::

        \theta = \operatorname{softplus}(\rho) + \epsilon_t, \qquad
        \rho = \operatorname{softplus}^{-1}\big(\max(\theta - \epsilon_t, \epsilon_t)\big),

    with :math:`\epsilon_t` = ``torch.finfo(dtype).tiny`` (1.2e-38 in float32, 2.2e-308 in
    float64). GPyTorch's ``Positive`` maps a raw value of -1179.5 (reached by L-BFGS when the optimum is at the
    boundary) to exactly 0 in float32, so that the value cannot be copied back into another model. Here the
    value stays positive and the inverse stays finite; for any value above the floor both maps are GPyTorch's
    up to :math:`\epsilon_{\mathrm{tiny}}`.

    Example:
        >>> import torch
        >>> c = FlooredPositive()
        >>> value = c.transform(torch.tensor([-1179.5]))
        >>> bool(value > 0), bool(torch.isfinite(c.inverse_transform(value)).all())
        (True, True)
    """

    def transform(self, tensor: Tensor) -> Tensor:
        if not self.enforced:
            return tensor
        return self._transform(tensor) + torch.finfo(tensor.dtype).tiny

    def inverse_transform(self, transformed_tensor: Tensor) -> Tensor:
        if not self.enforced:
            return transformed_tensor
        tiny = torch.finfo(transformed_tensor.dtype).tiny
        return self._inv_transform((transformed_tensor - tiny).clamp_min(tiny))
