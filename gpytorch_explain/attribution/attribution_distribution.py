#!/usr/bin/env python3
r"""The distribution returned by attribution GPs: a multitask normal whose variances may be exactly zero."""

from __future__ import annotations

import warnings

import torch
from gpytorch.distributions import MultitaskMultivariateNormal
from torch import Tensor

__all__ = ["AttributionDistribution"]


class AttributionDistribution(MultitaskMultivariateNormal):
    r"""A ``MultitaskMultivariateNormal`` whose variances may be exactly zero.

    An attribution at its own baseline is deterministic (:math:`\mathrm{IG}(\mathbf b) = \mathbf 0`),
    so zero variances are correct there: ``.variance`` clamps round-off below zero to zero instead
    of GPyTorch's ``min_variance`` (and its warning). Clearly negative values still warn.
    """

    @property
    def variance(self) -> Tensor:
        diag = self.lazy_covariance_matrix.diagonal(dim1=-1, dim2=-2)
        scale = diag.abs().max().clamp_min(torch.finfo(diag.dtype).tiny)
        if (diag < -1e3 * torch.finfo(diag.dtype).eps * scale).any():
            warnings.warn("Negative attribution variances beyond round-off were clamped to zero.", stacklevel=2)
        diag = diag.clamp_min(0)
        if not self._interleaved:
            new_shape = self._output_shape[:-2] + self._output_shape[:-3:-1]
            return diag.view(new_shape).transpose(-1, -2).contiguous()
        return diag.view(self._output_shape)
