#!/usr/bin/env python3
r"""How far integrated-gradient attributions are from completeness, per point."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["CompletenessGaps"]


@dataclass
class CompletenessGaps:
    r"""How far attributions are from completeness, per point.

    .. math::

        \text{mean\_gap} = \sum_i \mathbb E[\mathrm{IG}_i(\mathbf x)]
        - \left(\mathbb E[f(\mathbf x)] - \mathbb E[\bar f(\mathbf b)]\right), \qquad
        \text{variance\_gap} = \sum_{ij}\operatorname{Cov}(\mathrm{IG}_i, \mathrm{IG}_j)
        - \operatorname{Var}\left(f(\mathbf x) - \bar f(\mathbf b)\right),

    with :math:`\bar f(\mathbf b)` the average over the baselines; both are zero up to round-off
    (and, for the generic kernels, the quadrature error).
    """

    mean_gap: Tensor
    variance_gap: Tensor
    attribution_sum_mean: Tensor
    prediction_difference_mean: Tensor
    attribution_sum_variance: Tensor
    prediction_difference_variance: Tensor
