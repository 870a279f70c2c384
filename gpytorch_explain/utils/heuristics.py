#!/usr/bin/env python3
"""Initialisation heuristics."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["median_heuristic_lengthscale"]


def median_heuristic_lengthscale(x: Tensor, max_points: int = 2000, seed: int = 0) -> Tensor:
    r"""RBF lengthscale from the median heuristic (Garreau et al., 2017).

    GPX's kernel is :math:`\theta_1 \exp(-\|\mathbf x - \mathbf x'\|^2 / \theta_2)` with
    :math:`\theta_2` set to the median squared distance between distinct training inputs. In
    GPyTorch's parametrisation :math:`\exp(-\|\mathbf x - \mathbf x'\|^2 / 2\ell^2)` this is

    .. math:: \ell = \sqrt{\operatorname{median}_{i<j} \|\mathbf x_i - \mathbf x_j\|^2 / 2}.

    At most ``max_points`` rows (a fixed random subset) are used, so the cost is bounded.

    Example:
        >>> import torch
        >>> from gpytorch_explain.utils import median_heuristic_lengthscale
        >>> x = torch.tensor([[0.0], [1.0], [3.0]])
        >>> round(float(median_heuristic_lengthscale(x) ** 2), 6)  # median of {1, 9, 4} is 4, halved
        2.0
    """
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (n x D), got shape {tuple(x.shape)}.")
    if x.size(0) < 2:
        raise ValueError("The median heuristic needs at least two rows.")
    if x.size(0) > max_points:
        gen = torch.Generator().manual_seed(seed)
        x = x[torch.randperm(x.size(0), generator=gen)[:max_points].to(x.device)]
    sq = torch.cdist(x, x).pow(2)
    iu = torch.triu_indices(x.size(0), x.size(0), offset=1, device=x.device)
    d2 = sq[iu[0], iu[1]]
    d2 = d2[d2 > 0]
    if d2.numel() == 0:
        return torch.ones((), dtype=x.dtype, device=x.device)
    return (d2.median() / 2).sqrt()
