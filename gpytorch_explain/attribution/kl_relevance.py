#!/usr/bin/env python3
r"""KL relevance of input features for GP predictions (Paananen, Piironen, Andersen & Vehtari, 2019,
*Variable selection for Gaussian processes via sensitivity analysis of the posterior predictive
distribution*, AISTATS).

For a point :math:`\mathbf x` and feature :math:`j`, the predictive distributions at :math:`\mathbf x` and at
:math:`\mathbf x + \Delta\mathbf e_j` are compared by their Kullback–Leibler divergence, scaled so that it has a
finite limit as :math:`\Delta\to0`:

.. math::

    r_j(\mathbf x) = \frac{1}{\Delta}
        \sqrt{2\,\mathrm{KL}\big(p(y\mid\mathbf x)\,\|\,p(y\mid\mathbf x+\Delta\mathbf e_j)\big)},
    \qquad
    \mathrm{KL}\big(\mathcal N(\mu_1,\sigma_1^2)\|\mathcal N(\mu_2,\sigma_2^2)\big)
    = \log\frac{\sigma_2}{\sigma_1} + \frac{\sigma_1^2 + (\mu_1-\mu_2)^2}{2\sigma_2^2} - \frac12 .

As :math:`\Delta\to0`, :math:`r_j \to \sqrt{(\partial_j\mu)^2 + 2(\partial_j\sigma)^2}\,/\,\sigma`.
Paananen et al. average :math:`r_j` over the training points for a global ranking; the GPX paper uses the
per-point values as local relevances ("KL" baseline, :math:`\Delta = 10^{-3}`), which is what
:func:`kl_relevance` returns.
"""

from __future__ import annotations

import torch
from gpytorch.likelihoods import GaussianLikelihood
from torch import Tensor

from ..utils.validation import check_matrix

__all__ = ["gaussian_kl", "kl_relevance"]


def gaussian_kl(mean1: Tensor, var1: Tensor, mean2: Tensor, var2: Tensor) -> Tensor:
    r""":math:`\mathrm{KL}(\mathcal N(\mu_1,\sigma_1^2)\,\|\,\mathcal N(\mu_2,\sigma_2^2))`, elementwise.

    Example:
        >>> import torch
        >>> float(gaussian_kl(torch.tensor(0.0), torch.tensor(1.0), torch.tensor(1.0), torch.tensor(1.0)))
        0.5
    """
    return 0.5 * (torch.log(var2 / var1) + (var1 + (mean1 - mean2) ** 2) / var2 - 1.0)


def kl_relevance(
    model, x: Tensor, delta: float = 1e-3, observation_noise: bool = True, chunk_size: int = 4096
) -> Tensor:
    r"""Per-point KL relevance :math:`r_j(\mathbf x_i)` of every input feature, ``(m, D)``.

    :param model: a trained GPyTorch model in eval mode whose call ``model(x)`` returns the (latent)
        ``MultivariateNormal`` posterior, e.g. an ``ExactGP`` or a :class:`~gpytorch_explain.GPXModel` with
        :math:`\mathbf z = \mathbf x`; or a single-output BoTorch model, read through ``model.posterior(x,
        observation_noise=...)`` (which applies its input and outcome transforms). Batched and multi-output models
        are refused.
    :param x: ``(m, D)`` points (float64 recommended: the KL of two predictives :math:`\Delta` apart is
        :math:`O(\Delta^2)`, and in float32 it drowns in round-off for the default :math:`\Delta`).
    :param delta: the perturbation :math:`\Delta` (in the units of ``x``).
    :param observation_noise: compare predictive distributions of :math:`y` (latent variance plus the
        Gaussian likelihood's noise, as in Paananen et al.'s implementation for Gaussian observations) or,
        if ``False``, of the latent :math:`f`.
    :param chunk_size: points per model call (only predictive variances are formed, never a joint covariance).
    :return: non-negative tensor ``(m, D)``.

    Example:
        >>> import torch, gpytorch
        >>> x = torch.linspace(-1, 1, 15, dtype=torch.float64).unsqueeze(-1).repeat(1, 2)
        >>> x[:, 1] = x[:, 1].flip(0) ** 2
        >>> class GP(gpytorch.models.ExactGP):
        ...     def __init__(self, x, y):
        ...         super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        ...         self.mean_module = gpytorch.means.ZeroMean()
        ...         self.covar_module = gpytorch.kernels.RBFKernel()
        ...     def forward(self, x):
        ...         return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))
        >>> model = GP(x, torch.sin(3 * x[:, 0])).double().eval()
        >>> kl_relevance(model, x[:4]).shape
        torch.Size([4, 2])
    """
    x = check_matrix("x", x)
    if not (delta > 0):
        raise ValueError(f"delta must be positive, got {delta}.")
    if model.training:
        raise ValueError("kl_relevance needs the model in eval mode (call model.eval()).")
    lik = getattr(model, "likelihood", None)
    # a BoTorch model's posterior(x, observation_noise=True) adds its own noise (fixed noise included)
    if observation_noise and not _is_botorch_model(model) and not isinstance(lik, GaussianLikelihood):
        raise TypeError(
            "observation_noise=True needs a GaussianLikelihood on the model; pass observation_noise=False to use the "
            f"latent posterior (got {type(lik).__name__})."
        )
    m, D = x.shape
    shifted = x.unsqueeze(1) + delta * torch.eye(D, dtype=x.dtype, device=x.device)  # (m, D, D)
    points = torch.cat([x, shifted.reshape(m * D, D)], 0)
    means, variances = [], []
    botorch_model = _is_botorch_model(model)
    with torch.no_grad():
        for start in range(0, points.size(0), chunk_size):
            chunk = points[start : start + chunk_size]
            if botorch_model:
                # posterior() applies the model's input transform (model(x) in eval mode does not) and untransforms
                # the outcome: the predictive in the user's units
                post = model.posterior(chunk, observation_noise=observation_noise)
                mean, var = post.mean, post.variance
                if mean.shape != (chunk.size(0), 1):
                    raise ValueError(_single_output_message(type(model).__name__, tuple(mean.shape)))
                mean, var = mean.squeeze(-1), var.squeeze(-1)
            else:
                post = model(chunk)
                mean, var = post.mean, post.variance
                if mean.shape != (chunk.size(0),):
                    raise ValueError(_single_output_message(type(model).__name__, tuple(mean.shape)))
                if observation_noise:
                    noise = lik.noise
                    if noise.numel() != 1:
                        raise ValueError(
                            f"kl_relevance needs one observation-noise level; the likelihood has {noise.numel()} "
                            "(a batched or heteroskedastic likelihood). Pass observation_noise=False."
                        )
                    var = var + noise.reshape(())
            means.append(mean)
            variances.append(var)
    mean = torch.cat(means)
    var = torch.cat(variances).clamp_min(torch.finfo(x.dtype).tiny)
    mu1, v1 = mean[:m].unsqueeze(-1), var[:m].unsqueeze(-1)
    mu2, v2 = mean[m:].view(m, D), var[m:].view(m, D)
    kl = gaussian_kl(mu1, v1, mu2, v2).clamp_min(0)
    return (2 * kl).sqrt() / delta


def _is_botorch_model(model) -> bool:
    try:
        from botorch.models.model import Model
    except ImportError:  # pragma: no cover - botorch is a dependency
        return False
    return isinstance(model, Model)


def _single_output_message(name: str, shape: tuple) -> str:
    return (
        f"kl_relevance explains one output of an unbatched model: {name}'s predictive mean on m points has shape "
        f"{shape}, not (m,). Explain one output (or one batch member) at a time, e.g. a model per output."
    )
