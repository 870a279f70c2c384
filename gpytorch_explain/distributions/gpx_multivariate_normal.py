#!/usr/bin/env python3
r"""The latent of a GPX model together with the part of its variance that is weight noise.

In GPX, :math:`f_i = \mathbf w_i^\top\mathbf z_i` with :math:`\mathbf w_i = \mathbf g(\mathbf x_i) +
\boldsymbol\epsilon_{w,i}`, so the latent splits into :math:`h_i = \mathbf g(\mathbf x_i)^\top\mathbf z_i` and
:math:`e_i = \boldsymbol\epsilon_{w,i}^\top\mathbf z_i \sim \mathcal N(0, s_i)`,

.. math:: s_i = \sigma_w^2\,\|\mathbf z_i\|^2 ,

independent across samples. :class:`GPXMultivariateNormal` is the ``MultivariateNormal`` of :math:`\mathbf f`
(weight noise included, exactly what GPyTorch's code sees) that also carries :math:`\mathbf s` explicitly, so that
:class:`~gpytorch_explain.mlls.GPXVariationalELBO` can integrate :math:`e_i` inside the likelihood
(:func:`~gpytorch_explain.mlls.gpx_expected_log_prob`). Distributions derived from it by GPyTorch (sums,
slices, ``likelihood(...)`` marginals) are built through ``self.__class__(mean, covariance)`` and carry no
:math:`\mathbf s` (``weight_noise_variance is None``): :math:`\mathbf s` belongs to the latent the model returned.

Example:
    >>> import torch
    >>> mean, s = torch.zeros(3, dtype=torch.float64), torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    >>> f = GPXMultivariateNormal(mean, torch.eye(3, dtype=torch.float64) + torch.diag(s), weight_noise_variance=s)
    >>> f.weight_noise_variance
    tensor([0.1000, 0.2000, 0.3000], dtype=torch.float64)
    >>> torch.allclose(f.variance - f.weight_noise_variance, torch.ones(3, dtype=torch.float64))  # Var h = g(x)ᵀz
    True
"""

from __future__ import annotations

from gpytorch.distributions import MultivariateNormal
from torch import Tensor

__all__ = ["GPXMultivariateNormal"]


class GPXMultivariateNormal(MultivariateNormal):
    r"""``MultivariateNormal`` of the GPX latent :math:`\mathbf f`, with its weight-noise variance
    :math:`s_i = \sigma_w^2\|\mathbf z_i\|^2` (shape of the mean, or ``None`` when unknown).

    :param mean: Mean of :math:`\mathbf f`.
    :param covariance_matrix: Covariance of :math:`\mathbf f`, weight noise included (tensor or LinearOperator).
    :param weight_noise_variance: :math:`\mathbf s`, the diagonal part of the covariance that is weight noise.
    """

    #: :math:`\mathbf s` (also ``None`` on copies GPyTorch makes without calling ``__init__``, e.g. ``expand``)
    weight_noise_variance: Tensor | None = None

    def __init__(
        self,
        mean: Tensor,
        covariance_matrix,
        validate_args: bool = False,
        weight_noise_variance: Tensor | None = None,
    ):
        super().__init__(mean, covariance_matrix, validate_args=validate_args)
        if weight_noise_variance is not None and weight_noise_variance.shape != mean.shape:
            raise ValueError(
                f"weight_noise_variance must have the shape of the mean {tuple(mean.shape)}, "
                f"got {tuple(weight_noise_variance.shape)}."
            )
        self.weight_noise_variance = weight_noise_variance
