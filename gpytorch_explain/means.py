#!/usr/bin/env python3
r"""Mean functions."""

from __future__ import annotations

import torch
from gpytorch.means import Mean
from torch import Tensor

__all__ = ["FixedConstantMean"]


class FixedConstantMean(Mean):
    r"""A constant mean :math:`m(\mathbf x) = c` that is not a hyperparameter (a buffer, saved in the state dict).

    :class:`~gpytorch_explain.GPXModel` uses it with ``standardize_y=True``: :math:`c = \bar y`, the part of every
    prediction that the local weights do not explain.

    Example:
        >>> import torch
        >>> FixedConstantMean(2.5)(torch.zeros(3, 2))
        tensor([2.5000, 2.5000, 2.5000])
    """

    def __init__(self, constant: float | Tensor = 0.0):
        super().__init__()
        if not torch.is_tensor(constant):
            constant = torch.tensor(float(constant), dtype=torch.get_default_dtype())
        self.register_buffer("constant", constant.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        return self.constant.to(x).expand(x.shape[:-1])
