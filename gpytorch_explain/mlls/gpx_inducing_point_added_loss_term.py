#!/usr/bin/env python3
r"""The GPX trace term of Titsias' collapsed bound, added to the marginal likelihood with an inducing-point base.

With an ``InducingPointKernel`` base, :class:`~gpytorch_explain.GPXKernel` uses the Nyström
:math:`\mathbf Q = \boldsymbol\Phi\boldsymbol\Phi^\top` in place of :math:`\mathbf K`; in training mode it registers
this term with the kernel (as GPyTorch's SGPR registers ``InducingPointKernelAddedLossTerm``), and
``ExactMarginalLogLikelihood`` adds it.

Example:
    >>> import torch
    >>> from gpytorch.likelihoods import GaussianLikelihood
    >>> lik = GaussianLikelihood().double()
    >>> lik.noise = 0.5
    >>> trace = torch.tensor([0.2, 0.4], dtype=torch.float64)
    >>> weight = torch.tensor([0.5, 1.5], dtype=torch.float64)
    >>> term = GPXInducingPointAddedLossTerm(trace, weight, lik)
    >>> torch.allclose(term.loss(), -0.5 * (0.2 / 1.0 + 0.4 / 2.0) * torch.ones((), dtype=torch.float64))
    True
"""

from __future__ import annotations

from gpytorch.mlls import AddedLossTerm
from torch import Tensor

__all__ = ["GPXInducingPointAddedLossTerm"]


class GPXInducingPointAddedLossTerm(AddedLossTerm):
    r"""The trace term of the collapsed (Titsias) bound for GPX with an inducing-point base kernel.

    With :math:`g_l \mid \mathbf u_l` the exact conditional, :math:`\operatorname{Var}[f_i \mid \mathbf u]
    = \|\mathbf z_i\|^2 (k_{ii} - q_{ii})` and the noise of :math:`y_i` given :math:`\mathbf g` is
    :math:`\sigma_y^2 + \sigma_w^2\|\mathbf z_i\|^2`, so the bound adds

    .. math::

        -\frac12 \sum_i \frac{\|\mathbf z_i\|^2 (k_{ii} - q_{ii})}{\sigma_y^2 + \sigma_w^2 \|\mathbf z_i\|^2}

    to :math:`\log\mathcal N(\mathbf y \mid \mathbf 0, \mathbf C_Q)`. (GPyTorch's own
    ``InducingPointKernelAddedLossTerm`` is the :math:`d = 1`, :math:`\mathbf z = 1`, :math:`\sigma_w = 0` case.)
    """

    def __init__(self, trace_diag: Tensor, weight_diag: Tensor, likelihood):
        self.trace_diag = trace_diag
        self.weight_diag = weight_diag
        self.likelihood = likelihood

    def loss(self, *params) -> Tensor:
        shape = self.trace_diag.shape
        noise = self.likelihood._shaped_noise_covar(shape, *params).diagonal(dim1=-1, dim2=-2)
        return -0.5 * (self.trace_diag / (noise + self.weight_diag)).sum(-1)
