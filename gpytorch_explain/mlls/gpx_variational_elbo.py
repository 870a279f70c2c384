#!/usr/bin/env python3
r"""The objective of variational GPX: expected log-likelihood with the weight noise inside, and Bernoulli labels.

With :math:`h_i = \mathbf g(\mathbf x_i)^\top\mathbf z_i` under :math:`q` and the weight-noise part of the latent
:math:`e_i \sim \mathcal N(0, \sigma_w^2\|\mathbf z_i\|^2)`, :class:`GPXVariationalELBO` takes
:math:`\mathbb E_{q(h_i)}[\log\mathbb E_{e_i} p(y_i \mid h_i + e_i)]` (:func:`gpx_expected_log_prob`), a tighter
bound than GPyTorch's ``VariationalELBO`` on :math:`q(f_i)`. Binary labels are checked by
:func:`bernoulli_label_signs`. Used by :class:`~gpytorch_explain.VariationalGPXModel`.
"""

from __future__ import annotations

import math

import gpytorch
import numpy as np
import torch
from gpytorch.distributions import MultivariateNormal
from gpytorch.likelihoods import BernoulliLikelihood, Likelihood, MultitaskGaussianLikelihood
from torch import Tensor

from .._compat import _GaussianLikelihoodBase
from ..distributions import GPXMultivariateNormal

__all__ = [
    "GPXVariationalELBO",
    "bernoulli_label_signs",
    "gpx_expected_log_prob",
]


# ============================================================================ labels
def bernoulli_label_signs(target: Tensor) -> Tensor:
    r"""Binary labels as signs :math:`\pm 1`, after checking that they are one consistent scheme.

    Accepted: all labels in :math:`\{0, 1\}` (GPyTorch's convention, :math:`0 \mapsto -1`) or all in
    :math:`\{-1, +1\}`. Anything else, e.g. :math:`\{1, 2\}` or a 0 mixed into :math:`\pm 1` labels (which would
    otherwise contribute :math:`\log\Phi(0) = \log 0.5` per point), raises ``ValueError``.

    Example:
        >>> import torch
        >>> bernoulli_label_signs(torch.tensor([0.0, 1.0, 1.0]))
        tensor([-1.,  1.,  1.])
        >>> bernoulli_label_signs(torch.tensor([-1.0, 1.0]))
        tensor([-1.,  1.])
    """
    if not torch.is_tensor(target):
        raise TypeError(f"Bernoulli labels must be a torch.Tensor, got {type(target).__name__}.")
    values = torch.unique(target.detach())
    if not torch.isfinite(values).all():
        raise ValueError("Bernoulli labels contain NaN or infinite values.")
    if bool(torch.isin(values, values.new_tensor([0.0, 1.0])).all()):
        return target.mul(2).sub(1)
    if bool(torch.isin(values, values.new_tensor([-1.0, 1.0])).all()):
        return target
    shown = values[:8].tolist()
    hint = " (0 and -1 are mixed: use one scheme)" if bool((values == 0).any() and (values == -1).any()) else ""
    raise ValueError(
        f"BernoulliLikelihood labels must be all in {{0, 1}} or all in {{-1, +1}}; got the values {shown}"
        f"{' ...' if values.numel() > 8 else ''}{hint}."
    )


def _is_probit_bernoulli(likelihood: Likelihood) -> bool:
    """GPyTorch's probit ``BernoulliLikelihood`` (a subclass with its own ``forward`` may use another link)."""
    return isinstance(likelihood, BernoulliLikelihood) and type(likelihood).forward is BernoulliLikelihood.forward


# ============================================================================ expected log-likelihood
def gpx_expected_log_prob(
    likelihood: Likelihood,
    target: Tensor,
    mean: Tensor,
    variance: Tensor,
    weight_noise_variance: Tensor,
    num_locs: int | None = None,
    **kwargs,
) -> Tensor:
    r"""Expected log-likelihood with the weight noise integrated inside the likelihood.

    With :math:`h_i = \mathbf g(\mathbf x_i)^\top\mathbf z_i \sim q = \mathcal N(\mu_i, v_i)` and the weight-noise
    part of the latent :math:`e_i = \boldsymbol\epsilon_{w,i}^\top\mathbf z_i \sim \mathcal N(0, s_i)`,
    :math:`s_i = \sigma_w^2\|\mathbf z_i\|^2`, this returns per point

    .. math:: \mathbb E_{q(h_i)}\Bigl[\log \mathbb E_{e_i}\, p(y_i \mid h_i + e_i)\Bigr]
        \;\ge\; \mathbb E_{q(h_i)}\mathbb E_{e_i}\bigl[\log p(y_i \mid h_i + e_i)\bigr]

    (Jensen; the right side is what GPyTorch's ``VariationalELBO`` computes from :math:`q(f_i)`). Closed forms:

    * Gaussian (:math:`\sigma_y^2`): :math:`-\tfrac12\bigl[\log 2\pi(\sigma_y^2+s_i)
      + ((y_i-\mu_i)^2 + v_i)/(\sigma_y^2+s_i)\bigr]`;
    * Bernoulli (probit): :math:`\mathbb E_e\,\Phi(\pm(h+e)) = \Phi(\pm h/\sqrt{1+s})`, so it is
      :math:`\mathbb E_{q(h_i)}\log\Phi(\pm h_i/\sqrt{1+s_i})`, by Gauss-Hermite quadrature in the inputs' dtype
      (GPyTorch's own nodes and ``log_normal_cdf`` are only float32-accurate). Labels are checked by
      :func:`bernoulli_label_signs` (all :math:`\{0,1\}` or all :math:`\{-1,+1\}`; anything else raises), also for
      ``BernoulliLikelihood`` subclasses with another link (nested quadrature on :math:`\{0,1\}` labels);
    * any other one-dimensional likelihood: nested Gauss-Hermite quadrature (``num_locs`` nodes in each of the two
      integrals, default ``gpytorch.settings.num_gauss_hermite_locs``) of ``likelihood.forward(f).log_prob(y)``.

    :return: Tensor of the shape of ``mean`` (no sum over points).

    Example:
        >>> import torch
        >>> from gpytorch.likelihoods import GaussianLikelihood
        >>> lik = GaussianLikelihood().double()
        >>> y, mu, v, s = (torch.tensor([0.3], dtype=torch.float64) for _ in range(4))
        >>> closed = gpx_expected_log_prob(lik, y, mu, v, s)
        >>> closed.shape
        torch.Size([1])
    """
    if isinstance(likelihood, _GaussianLikelihoodBase) and not isinstance(likelihood, MultitaskGaussianLikelihood):
        noise = likelihood._shaped_noise_covar(mean.shape, **kwargs).diagonal(dim1=-1, dim2=-2)
        total = noise + weight_noise_variance
        return -0.5 * (torch.log(2 * math.pi * total) + ((target - mean).square() + variance) / total)
    if isinstance(likelihood, BernoulliLikelihood):
        sign = bernoulli_label_signs(target)
        if not _is_probit_bernoulli(likelihood):  # another link: nested quadrature of its own log_prob on {0, 1}
            labels = sign.add(1).div(2)
            return _nested_gauss_hermite(likelihood, labels, mean, variance, weight_noise_variance, num_locs, **kwargs)
        scale = (1 + weight_noise_variance).rsqrt()
        nodes, log_w = _gauss_hermite(num_locs, mean.dtype, mean.device)
        tail = [1] * mean.dim()
        f = (mean + (2 * variance.clamp_min(0)).sqrt() * nodes.view(-1, *tail)) * scale
        return (torch.special.log_ndtr(f * sign) * log_w.exp().view(-1, *tail)).sum(0)
    return _nested_gauss_hermite(likelihood, target, mean, variance, weight_noise_variance, num_locs, **kwargs)


def _gauss_hermite(num_locs: int | None, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    r"""Nodes :math:`\xi_k` and log-weights :math:`\log(w_k/\sqrt\pi)` of Gauss-Hermite quadrature, in ``dtype``."""
    num = gpytorch.settings.num_gauss_hermite_locs.value() if num_locs is None else int(num_locs)
    nodes, weights = np.polynomial.hermite.hermgauss(num)
    nodes = torch.as_tensor(nodes, dtype=dtype, device=device)
    return nodes, torch.as_tensor(np.log(weights / math.sqrt(math.pi)), dtype=dtype, device=device)


def _nested_gauss_hermite(
    likelihood: Likelihood, target: Tensor, mean: Tensor, variance: Tensor, s: Tensor, num_locs: int | None, **kwargs
) -> Tensor:
    r""":math:`\mathbb E_{h\sim\mathcal N(\mu,v)}[\log\mathbb E_{e\sim\mathcal N(0,s)}p(y\mid h+e)]`, Gauss-Hermite."""
    nodes, log_w = _gauss_hermite(num_locs, mean.dtype, mean.device)
    num = nodes.numel()
    tail = [1] * mean.dim()
    outer = mean + (2 * variance.clamp_min(0)).sqrt() * nodes.view(num, 1, *tail)  # (K, 1, ..., n)
    inner = (2 * s.clamp_min(0)).sqrt() * nodes.view(1, num, *tail)  # (1, K, ..., n)
    log_p = likelihood.forward(outer + inner, **kwargs).log_prob(target)  # (K, K, ..., n)
    log_inner = torch.logsumexp(log_p + log_w.view(1, num, *tail), dim=1)  # (K, ..., n)
    return (log_inner * log_w.exp().view(num, *tail)).sum(0)


class GPXVariationalELBO(gpytorch.mlls.VariationalELBO):
    r"""The ELBO of variational GPX with the weight noise integrated in the likelihood (a tighter bound).

    .. math::

        \mathcal L = \sum_i \mathbb E_{q(h_i)}\Bigl[\log\mathbb E_{e_i} p(y_i\mid h_i+e_i)\Bigr]
        - \mathrm{KL}\bigl[q(\mathbf v)\,\|\,\mathcal N(\mathbf 0,\mathbf I)\bigr]
        \;\le\; \log p(\mathbf y)

    (divided by ``num_data`` like GPyTorch's ELBO; see :func:`gpx_expected_log_prob`). For a Gaussian likelihood,
    inducing points at the training inputs and the optimal :math:`q`, it equals the exact GPX log marginal likelihood.

    GPyTorch's plain ``VariationalELBO(likelihood, model, num_data)`` also works with
    :class:`VariationalGPXModel`: it takes :math:`\mathbb E_{q(f_i)}[\log p(y_i\mid f_i)]` with the weight noise
    inside :math:`q(f_i)`, a valid but looser bound whose gap grows with :math:`\sigma_w^2` (so it pulls
    :math:`\sigma_w^2` towards 0, and for a Gaussian likelihood its optimal :math:`q` ignores :math:`\sigma_w^2`).
    It reads :math:`s_i` from the :class:`~gpytorch_explain.distributions.GPXMultivariateNormal` the model returns;
    with outputs of other models (a plain ``MultivariateNormal``) it falls back to the plain ELBO.

    Example:
        >>> import torch
        >>> from gpytorch_explain import GPXVariationalELBO, VariationalGPXModel
        >>> x = torch.randn(50, 2, dtype=torch.float64)
        >>> model = VariationalGPXModel(x[:10])
        >>> elbo = GPXVariationalELBO(model.likelihood, model, num_data=50)
        >>> elbo(model(x), x[:, 0] * x[:, 1]).shape
        torch.Size([])
    """

    def _log_likelihood_term(self, variational_dist_f: MultivariateNormal, target: Tensor, **kwargs) -> Tensor:
        s = variational_dist_f.weight_noise_variance if isinstance(variational_dist_f, GPXMultivariateNormal) else None
        if s is None:
            return super()._log_likelihood_term(variational_dist_f, target, **kwargs)
        mean = variational_dist_f.mean
        variance = (variational_dist_f.lazy_covariance_matrix.diagonal(dim1=-1, dim2=-2) - s).clamp_min(0)
        return gpx_expected_log_prob(self.likelihood, target, mean, variance, s, **kwargs).sum(-1)


def _label_scheme(target: Tensor, scheme: str | None, number: int) -> str | None:
    """The Bernoulli label scheme seen so far (``"01"``, ``"pm1"`` or ``None`` while only 1s were seen)."""
    here = "pm1" if bool(target.eq(-1).any()) else ("01" if bool(target.eq(0).any()) else None)
    if scheme is not None and here is not None and here != scheme:
        names = {"01": "{0, 1}", "pm1": "{-1, +1}"}
        raise ValueError(
            f"Bernoulli labels mix two schemes across batches: earlier batches use {names[scheme]}, batch {number} "
            f"uses {names[here]}; use one scheme for all labels."
        )
    return scheme if here is None else here
