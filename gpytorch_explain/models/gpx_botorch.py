#!/usr/bin/env python3
r"""BoTorch's model interface for :class:`~gpytorch_explain.GPXModel`: ``posterior()``."""

from __future__ import annotations

import torch
from gpytorch.distributions import MultivariateNormal
from linear_operator.operators import DenseLinearOperator
from torch import Tensor

from .._compat import import_botorch

__all__ = ["gpx_posterior"]


def gpx_posterior(
    model,
    X: Tensor,
    output_indices: list[int] | None = None,
    observation_noise: bool | Tensor = False,
    posterior_transform=None,
):
    r"""The joint posterior of :math:`f` (or :math:`y`) at each ``q``-batch of ``X``, as BoTorch's
    ``Model.posterior`` returns it (a ``GPyTorchPosterior`` over ``(*batch, q, 1)``).

    :param model: A :class:`~gpytorch_explain.GPXModel` (put in eval mode).
    :param X: ``(*batch, q, D)`` when :math:`\mathbf z = \mathbf x`. With separate features: rows ``[x | z]``
        (``D + d`` columns, so that an acquisition optimiser searches both), or ``(*batch, q, D)`` when
        ``model.z_from_x`` is set to a differentiable map from ``(n, D)`` to ``(n, d)`` (the features of a
        candidate are then computed from it).
    :param output_indices: ``None`` or ``[0]`` (one output).
    :param observation_noise: ``True`` adds the likelihood's noise :math:`\sigma_y^2`; a tensor ``(*batch, q)``
        (or ``(*batch, q, 1)``) adds that variance.
    :param posterior_transform: Optional BoTorch ``PosteriorTransform``.
    :return: In the units of ``train_y``: GPX works in raw units (its standardisation lives in the kernel's
        feature scale and the mean module), so nothing is left to untransform.

    Each ``q``-batch is one joint ``MultivariateNormal`` (``q = 1``: the marginal variances of all candidates
    from one evaluation); the result is differentiable in ``X``, as ``optimize_acqf`` needs.

    BoTorch is imported here, not with this module: importing it changes GPyTorch's global defaults
    (``max_cholesky_size`` 4096, ``cholesky_max_tries`` 6), which importing gpytorch-explain must not do.
    """
    import_botorch()  # first import keeps GPyTorch's global settings (see gpytorch_explain._compat)
    from botorch.models.utils.assorted import gpt_posterior_settings
    from botorch.posteriors import GPyTorchPosterior

    if output_indices is not None and list(output_indices) != [0]:
        raise ValueError(f"GPXModel has one output; output_indices must be None or [0], got {output_indices}.")
    if not torch.is_tensor(X) or X.dim() < 2:
        raise ValueError("X must be a tensor of shape (*batch, q, columns).")
    model.eval()
    batch, q = X.shape[:-2], X.size(-2)
    flat = X.reshape(-1, X.size(-1))
    if model.z_from_x is not None and model.covar_module.z_dims is not None and flat.size(-1) == model.x_dims:
        flat = torch.cat([flat, model.z_from_x(flat)], dim=-1)
    with gpt_posterior_settings():
        if q == 1:
            mvn = model(flat)
            mean = mvn.mean.reshape(*batch, 1)
            covar = mvn.variance.reshape(*batch, 1, 1)
        else:
            parts = [model(part) for part in flat.split(q)]
            mean = torch.stack([p.mean for p in parts]).reshape(*batch, q)
            covar = torch.stack([p.covariance_matrix for p in parts]).reshape(*batch, q, q)
    if observation_noise is not False:
        if torch.is_tensor(observation_noise):
            noise = observation_noise
            if noise.dim() == len(batch) + 2 and noise.size(-1) == 1:
                noise = noise.squeeze(-1)
            noise = noise.expand(*batch, q)
        else:
            noise = model.likelihood.noise.reshape(-1)[0].expand(*batch, q)
        covar = covar + torch.diag_embed(noise)
    # lazy: no eager Cholesky of near-duplicate candidates (BoTorch's samplers factor with jitter)
    posterior = GPyTorchPosterior(MultivariateNormal(mean, DenseLinearOperator(covar)))
    if posterior_transform is not None:
        return posterior_transform(posterior)
    return posterior
