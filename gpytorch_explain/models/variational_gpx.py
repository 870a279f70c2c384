#!/usr/bin/env python3
r"""Variational GPX: GPX (Yoshikawa & Iwata) on GPyTorch's ``ApproximateGP``, for large data and any likelihood.

GPX explains each prediction by a local linear model whose weights are Gaussian processes,

.. math::

    y_i \sim p(y_i \mid f_i), \qquad f_i = \mathbf w_i^\top \mathbf z_i, \qquad
    \mathbf w_i = \mathbf g(\mathbf x_i) + \boldsymbol\epsilon_{w,i}, \qquad
    g_l \sim \mathcal{GP}(0, k) \ (l = 1..d), \qquad
    \boldsymbol\epsilon_{w,i} \sim \mathcal N(\mathbf 0, \sigma_w^2\mathbf I_d).

Here each latent :math:`g_l` gets inducing values :math:`\mathbf u_l = g_l(\mathbf U_l)` at :math:`M`
inducing points (shared, :math:`\mathbf U_l = \mathbf U`, or one set per latent), whitened as
:math:`\mathbf u_l = \mathbf L_l \mathbf v_l` with :math:`\mathbf L_l \mathbf L_l^\top = k(\mathbf U_l, \mathbf U_l)`,
and :math:`q(\mathbf v) = \mathcal N(\mathbf m, \mathbf S)` over all :math:`dM` whitened values jointly
(index ``latent * M + j``). Jointly matters: given :math:`y`, the weights of different features are strongly
(anti-)correlated, and only a joint :math:`q` contains the exact posterior (see
:class:`VariationalGPXModel`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence

import gpytorch
import numpy as np
import torch
from gpytorch.constraints import GreaterThan
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import (
    BernoulliLikelihood,
    GaussianLikelihood,
    Likelihood,
    MultitaskGaussianLikelihood,
    SoftmaxLikelihood,
)
from gpytorch.likelihoods.gaussian_likelihood import _GaussianLikelihoodBase
from gpytorch.models import ApproximateGP
from gpytorch.utils.memoize import cached
from gpytorch.variational import (
    CholeskyVariationalDistribution,
    MeanFieldVariationalDistribution,
    NaturalVariationalDistribution,
)
from gpytorch.variational._variational_distribution import _VariationalDistribution
from gpytorch.variational._variational_strategy import _VariationalStrategy
from gpytorch.variational.natural_variational_distribution import _NaturalVariationalDistribution
from linear_operator.operators import (
    DiagLinearOperator,
    IdentityLinearOperator,
    KroneckerProductLinearOperator,
    MatmulLinearOperator,
)
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from ..explanation import GPXExplanation
from ..kernels import GPXKernel
from ..utils import check_feature_names, check_matrix, check_same_rows, check_vector, median_heuristic_lengthscale

__all__ = [
    "WEIGHT_NOISE_FLOOR",
    "GPXVariationalELBO",
    "GPXVariationalStrategy",
    "VariationalGPXModel",
    "bernoulli_label_signs",
    "gpx_expected_log_prob",
]

#: attribute of the latent ``MultivariateNormal`` holding :math:`s_i = \sigma_w^2\|\mathbf z_i\|^2`
WEIGHT_NOISE_ATTR = "gpx_weight_noise_variance"
#: lower bound of :math:`\sigma_w^2` (``GreaterThan`` constraint): softplus of a very negative raw value is exactly 0
#: in float32 (and in float64 below about -745), which would make the weight noise vanish and the setter reject it
WEIGHT_NOISE_FLOOR = 1e-8


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
    With outputs of other models (no weight-noise attribute) this class falls back to the plain ELBO.

    Example:
        >>> import torch
        >>> from gpytorch_explain.models.variational_gpx import GPXVariationalELBO, VariationalGPXModel
        >>> x = torch.randn(50, 2, dtype=torch.float64)
        >>> model = VariationalGPXModel(x[:10])
        >>> elbo = GPXVariationalELBO(model.likelihood, model, num_data=50)
        >>> elbo(model(x), x[:, 0] * x[:, 1]).shape
        torch.Size([])
    """

    def _log_likelihood_term(self, variational_dist_f: MultivariateNormal, target: Tensor, **kwargs) -> Tensor:
        s = getattr(variational_dist_f, WEIGHT_NOISE_ATTR, None)
        if s is None:
            return super()._log_likelihood_term(variational_dist_f, target, **kwargs)
        mean = variational_dist_f.mean
        variance = (variational_dist_f.lazy_covariance_matrix.diagonal(dim1=-1, dim2=-2) - s).clamp_min(0)
        return gpx_expected_log_prob(self.likelihood, target, mean, variance, s, **kwargs).sum(-1)


# ============================================================================ strategy
class GPXVariationalStrategy(_VariationalStrategy):
    r"""Whitened inducing-point strategy for :math:`d` latent GPs mixed per sample by :math:`\mathbf z_i`.

    Like GPyTorch's ``LMCVariationalStrategy``, with the mixing coefficients being each sample's own
    :math:`\mathbf z_i`. For a batch of inputs :math:`[\mathbf X \mid \mathbf Z]` (``n`` rows) let
    :math:`\mathbf A_l = k(\mathbf X, \mathbf U_l)\mathbf L_l^{-\top}` (:math:`n\times M`) and
    :math:`\mathbf B = [\operatorname{diag}(\mathbf z_{\cdot 1})\mathbf A_1, \dots,
    \operatorname{diag}(\mathbf z_{\cdot d})\mathbf A_d]` (:math:`n\times dM`). Then
    :math:`q(\mathbf f) = \int p(\mathbf f\mid\mathbf v)\,q(\mathbf v)\,d\mathbf v = \mathcal N(\mathbf B\mathbf m,\,
    \boldsymbol\Sigma_f)` with

    .. math::

        \boldsymbol\Sigma_f = \underbrace{(\mathbf K_{XX} + \sigma_w^2\mathbf I)\odot\mathbf Z\mathbf Z^\top}_{
        \text{GPX prior}} + \mathbf B(\mathbf S - \mathbf I)\mathbf B^\top,

    i.e. :math:`\operatorname{Cov}(f_i, f_j) = \sum_{l,l'} z_{il}z_{jl'}\operatorname{Cov}_q(g_l(\mathbf x_i),
    g_{l'}(\mathbf x_j)) + \sigma_w^2\delta_{ij}\|\mathbf z_i\|^2`. The covariance is lazy (a low-rank Hadamard term
    plus a rank-:math:`dM` term), so the ELBO's marginal variances cost :math:`O(n\,(dM)^2)` for a joint
    :math:`\mathbf S` and :math:`O(n\,dM^2)` for one block per latent; no :math:`n\times n` matrix is formed.
    The KL term is :math:`\mathrm{KL}[\mathcal N(\mathbf m,\mathbf S)\,\|\,\mathcal N(\mathbf 0,\mathbf I)]`.

    :param model: The :class:`VariationalGPXModel` (provides ``covar_module``, a
        :class:`~gpytorch_explain.GPXKernel`).
    :param inducing_points: :math:`\mathbf U`, ``(M, D)`` shared by all latents or ``(d, M, D)``.
    :param variational_distribution: Over the whitened values: ``num_inducing_points = d*M`` with no batch shape
        (joint over latents), or ``num_inducing_points = M`` with ``batch_shape = (d,)`` (latents independent).
    :param num_features: :math:`d`.
    :param learn_inducing_locations: Whether :math:`\mathbf U` is a parameter.
    :param jitter_val: Added to :math:`k(\mathbf U_l,\mathbf U_l)` before its Cholesky factorisation (default:
        ``gpytorch.settings.variational_cholesky_jitter``).
    """

    def __init__(
        self,
        model: VariationalGPXModel,
        inducing_points: Tensor,
        variational_distribution: _VariationalDistribution,
        num_features: int,
        learn_inducing_locations: bool = True,
        jitter_val: float | None = None,
    ):
        d = int(num_features)
        num_inducing = inducing_points.size(-2)
        shape = variational_distribution.shape()
        if shape not in (torch.Size([d * num_inducing]), torch.Size([d, num_inducing])):
            raise ValueError(
                f"The variational distribution must have shape ({d * num_inducing},) (joint over the d = {d} latents "
                f"and M = {num_inducing} inducing points) or batch_shape ({d},) with {num_inducing} inducing points, "
                f"got shape {tuple(shape)}."
            )
        super().__init__(model, inducing_points, variational_distribution, learn_inducing_locations, jitter_val)
        self.num_features = d

    @property
    def num_inducing(self) -> int:
        """:math:`M`, the number of inducing points per latent."""
        return self.inducing_points.size(-2)

    @property
    def joint(self) -> bool:
        """Whether :math:`q` is joint over the latents (else one independent block per latent)."""
        return self._variational_distribution.shape().numel() == self._variational_distribution.shape()[-1]

    @property
    def prior_distribution(self) -> MultivariateNormal:
        r""":math:`p(\mathbf v) = \mathcal N(\mathbf 0, \mathbf I)` in the variational distribution's shape."""
        shape = self._variational_distribution.shape()
        ref = self.inducing_points
        zeros = torch.zeros(shape, dtype=ref.dtype, device=ref.device)
        return MultivariateNormal(zeros, DiagLinearOperator(torch.ones_like(zeros)))

    def train(self, mode: bool = True) -> GPXVariationalStrategy:
        if (self.training and not mode) or mode:
            self._clear_cache()
        return super().train(mode)

    def kl_divergence(self) -> Tensor:
        r""":math:`\mathrm{KL}[q(\mathbf v)\,\|\,p(\mathbf v)]`, summed over latents."""
        return super().kl_divergence().sum()

    # ------------------------------------------------------------------ pieces
    def _maybe_initialize(self) -> None:
        if not self.variational_params_initialized.item():
            self._variational_distribution.initialize_variational_distribution(self.prior_distribution)
            self.variational_params_initialized.fill_(1)

    @cached(name="cholesky_factor")
    def cholesky_factor(self) -> Tensor:
        r""":math:`\mathbf L_l`, the Cholesky factor of :math:`k(\mathbf U_l,\mathbf U_l)+\text{jitter}\,\mathbf I`."""
        inducing = self.inducing_points
        kuu = self.model.covar_module.base_kernel(inducing).to_dense()
        eye = torch.eye(kuu.size(-1), dtype=kuu.dtype, device=kuu.device)
        return psd_safe_cholesky(kuu + self.jitter_val * eye)

    def interp(self, x: Tensor) -> Tensor:
        r""":math:`\mathbf A_l = k(\mathbf X, \mathbf U_l)\mathbf L_l^{-\top}`, shape ``(d or 1, n, M)``."""
        inducing = self.inducing_points
        if inducing.dim() == 3:
            x = x.expand(inducing.size(0), *x.shape)
        kux = self.model.covar_module.base_kernel(inducing, x).to_dense()
        res = torch.linalg.solve_triangular(self.cholesky_factor(), kux, upper=False).mT
        return res if res.dim() == 3 else res.unsqueeze(0)

    def moments(self) -> tuple[Tensor, Tensor]:
        r""":math:`\mathbf m` as ``(d, M)``; :math:`\mathbf S-\mathbf I` as ``(dM, dM)`` or per latent ``(d, M, M)``."""
        dist = self.variational_distribution
        d, num = self.num_features, self.num_inducing
        mean = dist.mean.reshape(d, num)
        covar = dist.covariance_matrix
        eye = torch.eye(covar.size(-1), dtype=covar.dtype, device=covar.device)
        return mean, covar - eye

    def apply_middle(self, factor: Tensor, middle: Tensor) -> Tensor:
        r"""Rows of ``factor`` (``(..., d, M)``, latent blocks) times :math:`\mathbf S - \mathbf I`, same shape."""
        if middle.dim() == 2:
            flat = factor.reshape(*factor.shape[:-2], -1) @ middle
            return flat.reshape(factor.shape)
        return torch.einsum("...lj,ljk->...lk", factor, middle)

    def full_middle(self, middle: Tensor) -> Tensor:
        r""":math:`\mathbf S - \mathbf I` as a dense ``(dM, dM)`` matrix."""
        return middle if middle.dim() == 2 else torch.block_diag(*middle.unbind(0))

    # ------------------------------------------------------------------ q(f)
    def __call__(self, x: Tensor, prior: bool = False, **kwargs) -> MultivariateNormal:
        if prior:
            return self.model.forward(x)
        if self.training:
            self._clear_cache()
        self._maybe_initialize()
        return self.forward(x)

    def forward(self, inputs: Tensor, *args, **kwargs) -> MultivariateNormal:
        r""":math:`q(\mathbf f)` at inputs :math:`[\mathbf X\mid\mathbf Z]` (``(n, D+d)``; ``(n, D)`` when z = x)."""
        covar_module = self.model.covar_module
        x, z = covar_module.split_inputs(inputs)
        mean_v, middle = self.moments()
        factor = z.mT.unsqueeze(-1) * self.interp(x)  # (d, n, M): rows z_il A_l[i]
        factor = factor.transpose(0, 1)  # (n, d, M) = B
        mean = (factor * mean_v).sum((-1, -2))
        factor_mid = self.apply_middle(factor, middle)
        n = factor.size(0)
        low_rank = MatmulLinearOperator(factor.reshape(n, -1), factor_mid.reshape(n, -1).mT)
        covar = covar_module(inputs) + low_rank
        out = MultivariateNormal(mean, covar)
        setattr(out, WEIGHT_NOISE_ATTR, covar_module.weight_noise * z.square().sum(-1))
        return out


# ============================================================================ model
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


_DISTRIBUTIONS = ("cholesky", "natural", "meanfield", "independent")


class VariationalGPXModel(ApproximateGP):
    r"""GPX with sparse variational inference: minibatch training and any likelihood (e.g. GPX classification).

    The model is GPX (see :class:`~gpytorch_explain.GPXModel`) with a general likelihood,

    .. math::

        y_i \sim p(y_i\mid f_i), \quad f_i = \mathbf w_i^\top\mathbf z_i, \quad
        \mathbf w_i = \mathbf g(\mathbf x_i) + \boldsymbol\epsilon_{w,i}, \quad g_l\sim\mathcal{GP}(0,k),

    approximated with :math:`M` inducing points per latent and a Gaussian :math:`q` over the :math:`dM` whitened
    inducing values (:class:`GPXVariationalStrategy`). Then:

    * ``model(x, z)`` is :math:`q(f_*)` (a ``MultivariateNormal``; includes :math:`\sigma_w^2\|\mathbf z_*\|^2`)
      and ``model.likelihood(model(x, z))`` the predictive of :math:`y_*` (for ``BernoulliLikelihood``:
      :math:`p(y_*=1) = \Phi(\mu_*/\sqrt{1+\sigma_*^2})`);
    * :meth:`predict_weights` is :math:`q(\mathbf w_*) = q(\mathbf g(\mathbf X_*)) + \mathcal N(\mathbf 0,
      \sigma_w^2\mathbf I)`, jointly over points and features;
    * :meth:`explain` returns a :class:`~gpytorch_explain.GPXExplanation`.

    Train with :meth:`fit` or by hand: inputs are rows :math:`[\mathbf x\mid\mathbf z]` (just :math:`\mathbf x` when
    z = x), so a plain ``DataLoader`` minibatches them, and the objective is
    ``GPXVariationalELBO(model.likelihood, model, num_data)`` (tight; see :class:`GPXVariationalELBO`) or GPyTorch's
    ``VariationalELBO``. ``model.parameters()`` includes the likelihood's.

    With a joint :math:`q` (``"cholesky"`` or ``"natural"``), a Gaussian likelihood, :math:`\mathbf U = \mathbf X`
    and the optimal :math:`q`, the tight ELBO equals the exact log marginal likelihood and :meth:`predict_weights`
    equals :meth:`GPXModel.predict_weights` (up to the jitter). ``"independent"`` (one :math:`M\times M` block per
    latent) and ``"meanfield"`` are cheaper but cannot represent the posterior correlation between features.

    :param inducing_points: :math:`\mathbf U`, ``(M, D)`` shared by the latents, or ``(d, M, D)``.
    :param z_dims: :math:`d` when the explanation features :math:`\mathbf z` are separate columns; ``None`` means
        :math:`\mathbf z = \mathbf x` (:math:`d = D`).
    :param likelihood: Any one-dimensional GPyTorch likelihood (default: ``GaussianLikelihood`` with
        :math:`\sigma_y^2 = 0.01`).
    :param base_kernel: :math:`k` on :math:`\mathbf x`, shared by the latents (no batch shape; default
        ``ScaleKernel(RBFKernel())``, outputscale 1, lengthscale from the median heuristic on :math:`\mathbf U`).
    :param variational_distribution: ``"cholesky"`` (default), ``"natural"`` (for natural-gradient descent),
        ``"meanfield"``, ``"independent"``, or a GPyTorch variational distribution of shape ``(d*M,)`` or
        batch ``(d,)`` x ``M``.
    :param learn_inducing_locations: Whether :math:`\mathbf U` is trained.
    :param jitter_val: Jitter of :math:`k(\mathbf U,\mathbf U)` (default: GPyTorch's variational jitter).
    :param weight_noise: Initial :math:`\sigma_w^2`. It is constrained to :math:`\sigma_w^2 \ge`
        :data:`WEIGHT_NOISE_FLOOR` (``GreaterThan``), so it never underflows to exactly 0 (float32 included), and
        the setter accepts any fitted value (``model.weight_noise = other.weight_noise.detach()``, raised to the floor).
    :param feature_names: Optional names of the :math:`d` features (default ``x0, x1, ...`` when z = x).

    Labels of a ``BernoulliLikelihood`` must be all in :math:`\{0, 1\}` or all in :math:`\{-1, +1\}` (checked in
    :meth:`fit` across batches and in :class:`GPXVariationalELBO`); ``SoftmaxLikelihood`` / multitask likelihoods and
    half precision are refused at construction.

    Example:
        >>> import torch
        >>> from gpytorch_explain.models.variational_gpx import VariationalGPXModel
        >>> x = torch.randn(500, 3, dtype=torch.float64)
        >>> y = x[:, 0] * torch.sin(x[:, 1])
        >>> model = VariationalGPXModel(x[:16]).fit(x, y, num_epochs=2, batch_size=100)
        >>> weights = model.predict_weights(x[:5])
        >>> weights.mean.shape, weights.covariance_matrix.shape
        (torch.Size([5, 3]), torch.Size([15, 15]))
    """

    def __init__(
        self,
        inducing_points: Tensor,
        z_dims: int | None = None,
        likelihood: Likelihood | None = None,
        base_kernel: Kernel | None = None,
        variational_distribution: str | _VariationalDistribution = "cholesky",
        learn_inducing_locations: bool = True,
        jitter_val: float | None = None,
        weight_noise: float = 0.01,
        feature_names: Sequence[str] | None = None,
    ):
        if not torch.is_tensor(inducing_points):
            raise TypeError(f"inducing_points must be a torch.Tensor, got {type(inducing_points).__name__}.")
        if inducing_points.dim() == 3:
            check_matrix("inducing_points[0]", inducing_points[0])
            check_matrix("inducing_points", inducing_points.reshape(-1, inducing_points.size(-1)))
        else:
            check_matrix("inducing_points", inducing_points)
        if inducing_points.size(-2) == 0:
            raise ValueError("inducing_points has no rows; at least one inducing point is needed.")
        if z_dims is not None and (isinstance(z_dims, bool) or not isinstance(z_dims, int) or z_dims < 1):
            raise ValueError(f"z_dims must be a positive int or None, got {z_dims!r}.")
        x_dims = inducing_points.size(-1)
        d = x_dims if z_dims is None else z_dims
        if inducing_points.dim() == 3 and inducing_points.size(0) != d:
            raise ValueError(
                f"Per-latent inducing_points must have shape (d, M, D) with d = {d}, "
                f"got {tuple(inducing_points.shape)}."
            )
        dtype, device = inducing_points.dtype, inducing_points.device
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(
                f"inducing_points has dtype {dtype}; VariationalGPXModel supports float32 and float64 only (half "
                "precision cannot hold the Cholesky factors and solves): convert with .float() or .double()."
            )
        num_inducing = inducing_points.size(-2)

        if likelihood is None:
            likelihood = GaussianLikelihood()
            likelihood.noise = 0.01
        elif not isinstance(likelihood, Likelihood):
            raise TypeError(f"likelihood must be a gpytorch Likelihood, got {type(likelihood).__name__}.")
        elif isinstance(likelihood, (MultitaskGaussianLikelihood, SoftmaxLikelihood)):
            raise TypeError(
                f"VariationalGPXModel has one latent output f = wᵀz, so {type(likelihood).__name__} (a multitask / "
                "multi-class likelihood, which needs several latent functions) is not supported. Supported: any "
                "likelihood of one latent value per point, e.g. GaussianLikelihood, BernoulliLikelihood (binary "
                "classification, labels {0, 1} or {-1, +1}), StudentTLikelihood, LaplaceLikelihood, "
                "BetaLikelihood. For C > 2 classes, fit one binary (one-vs-rest) model per class."
            )

        if base_kernel is None:
            base_kernel = ScaleKernel(RBFKernel())
            base_kernel.outputscale = 1.0
            flat = inducing_points.detach().reshape(-1, x_dims)
            if flat.size(0) >= 2:
                base_kernel.base_kernel.lengthscale = median_heuristic_lengthscale(flat)
        elif not isinstance(base_kernel, Kernel):
            raise TypeError(f"base_kernel must be a gpytorch Kernel, got {type(base_kernel).__name__}.")
        elif base_kernel.batch_shape != torch.Size([]):
            raise ValueError(
                f"base_kernel must have no batch shape (one kernel k shared by the latents, as in GPX), "
                f"got batch_shape {tuple(base_kernel.batch_shape)}."
            )

        if isinstance(variational_distribution, str):
            kind = variational_distribution.lower()
            if kind == "cholesky":
                variational_distribution = CholeskyVariationalDistribution(d * num_inducing)
            elif kind == "natural":
                variational_distribution = NaturalVariationalDistribution(d * num_inducing)
            elif kind == "meanfield":
                variational_distribution = MeanFieldVariationalDistribution(d * num_inducing)
            elif kind == "independent":
                variational_distribution = CholeskyVariationalDistribution(num_inducing, batch_shape=torch.Size([d]))
            else:
                raise ValueError(f"variational_distribution must be one of {_DISTRIBUTIONS}, got {kind!r}.")
        elif not isinstance(variational_distribution, _VariationalDistribution):
            raise TypeError(
                "variational_distribution must be a string or a gpytorch variational distribution, "
                f"got {type(variational_distribution).__name__}."
            )

        strategy = GPXVariationalStrategy(
            self, inducing_points, variational_distribution, d, learn_inducing_locations, jitter_val
        )
        super().__init__(strategy)
        self.likelihood = likelihood
        self.covar_module = GPXKernel(
            base_kernel, x_dims=x_dims, z_dims=z_dims, weight_noise_constraint=GreaterThan(WEIGHT_NOISE_FLOOR)
        )
        self.to(dtype=dtype, device=device)
        self.weight_noise = weight_noise

        self.feature_names = check_feature_names(feature_names, d)

    # ----------------------------------------------------------------- properties
    @property
    def x_dims(self) -> int:
        """:math:`D`, the number of columns of :math:`\\mathbf x`."""
        return self.covar_module.x_dims

    @property
    def z_dims(self) -> int | None:
        """:math:`d` for separate explanation features, ``None`` when :math:`\\mathbf z = \\mathbf x`."""
        return self.covar_module.z_dims

    @property
    def num_features(self) -> int:
        """:math:`d`, the number of explanation features (latent GPs)."""
        return self.variational_strategy.num_features

    @property
    def weight_noise(self) -> Tensor:
        r""":math:`\sigma_w^2`, the variance of the weight noise."""
        return self.covar_module.weight_noise

    @weight_noise.setter
    def weight_noise(self, value: Tensor | float) -> None:
        r"""Set :math:`\sigma_w^2`; values below :data:`WEIGHT_NOISE_FLOOR` (including an exact 0, e.g. a value that
        underflowed in another model) are raised to the floor. Negative or non-finite values raise."""
        raw = self.covar_module.raw_weight_noise
        value = value.detach() if torch.is_tensor(value) else torch.as_tensor(value, dtype=raw.dtype)
        value = value.to(dtype=raw.dtype, device=raw.device)
        if not torch.isfinite(value).all() or (value < 0).any():
            raise ValueError(f"weight_noise must be a finite non-negative variance, got {value}.")
        floor = WEIGHT_NOISE_FLOOR * (1 + 64 * torch.finfo(raw.dtype).eps)  # keeps the inverse softplus finite
        self.covar_module.weight_noise = value.clamp_min(floor)

    @property
    def base_kernel(self) -> Kernel:
        """The kernel :math:`k` on :math:`\\mathbf x`."""
        return self.covar_module.base_kernel

    @property
    def inducing_points(self) -> Tensor:
        r""":math:`\mathbf U`, ``(M, D)`` or ``(d, M, D)``."""
        return self.variational_strategy.inducing_points

    def _dtype(self) -> torch.dtype:
        return self.covar_module.raw_weight_noise.dtype

    # ----------------------------------------------------------------- inputs
    def _check_x(self, x: Tensor, name: str = "x") -> Tensor:
        x = check_matrix(name, x, cols=self.x_dims, cols_name=f"columns (the model's x has D = {self.x_dims})")
        if x.dtype != self._dtype():
            raise TypeError(f"{name} has dtype {x.dtype} but the model is {self._dtype()}.")
        return x

    def _make_inputs(self, x: Tensor, z: Tensor | None) -> Tensor:
        """The input rows ``[x | z]`` (``x`` when z = x), validated."""
        if not torch.is_tensor(x):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}.")
        if self.z_dims is None:
            if z is not None:
                raise ValueError("This model was built with z = x (z_dims=None); do not pass z.")
            return self._check_x(x)
        if z is None:
            width = self.x_dims + self.z_dims
            if x.dim() == 2 and x.size(-1) == width:  # already-joined rows [x | z], e.g. from a DataLoader
                check_matrix("x", x)
                if x.dtype != self._dtype():
                    raise TypeError(f"x has dtype {x.dtype} but the model is {self._dtype()}.")
                return x
            raise ValueError(
                f"This model explains with separate features z (d = {self.z_dims}); call model(x, z) or pass "
                f"joined rows [x | z] with {width} columns (got shape {tuple(x.shape)})."
            )
        x = self._check_x(x)
        z = check_matrix("z", z, cols=self.z_dims, cols_name=f"columns (the model's z has d = {self.z_dims})")
        if z.dtype != x.dtype:
            raise TypeError(f"x and z must share one dtype, got {x.dtype} and {z.dtype}.")
        check_same_rows(x=x, z=z)
        return torch.cat([x, z], dim=-1)

    # ----------------------------------------------------------------- GPyTorch API
    def forward(self, inputs: Tensor) -> MultivariateNormal:
        r"""The GPX prior of :math:`\mathbf f`: :math:`\mathcal N(\mathbf 0, (\mathbf K+\sigma_w^2\mathbf I)\odot
        \mathbf Z\mathbf Z^\top)`."""
        covar = self.covar_module(inputs)
        out = MultivariateNormal(torch.zeros(covar.shape[:-1], dtype=covar.dtype, device=covar.device), covar)
        _, z = self.covar_module.split_inputs(inputs)
        setattr(out, WEIGHT_NOISE_ATTR, self.weight_noise * z.square().sum(-1))
        return out

    def __call__(self, x: Tensor, z: Tensor | None = None, prior: bool = False, **kwargs) -> MultivariateNormal:
        r""":math:`q(\mathbf f_*)` at :math:`(\mathbf x_*, \mathbf z_*)` (the prior when ``prior=True``)."""
        return super().__call__(self._make_inputs(x, z), prior=prior, **kwargs)

    # ----------------------------------------------------------------- weights
    def _weight_terms(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        strategy = self.variational_strategy
        if self.training:
            strategy._clear_cache()
        strategy._maybe_initialize()
        mean_v, middle = strategy.moments()
        interp = strategy.interp(x).expand(self.num_features, x.size(0), strategy.num_inducing)  # (d, m, M)
        return interp, mean_v, middle, self.base_kernel(x, diag=True) + self.weight_noise

    def predict_weights(self, x: Tensor) -> MultitaskMultivariateNormal:
        r"""Variational posterior of the local weights :math:`\mathbf w_*=\mathbf g(\mathbf x_*)+\boldsymbol\epsilon_w`.

        With :math:`\mathbf A_l = k(\mathbf X_*,\mathbf U_l)\mathbf L_l^{-\top}` and :math:`\mathbf H`
        (:math:`md\times dM`) the block matrix with :math:`\mathbf H_{(p,l),(l',j)} = \delta_{ll'}(\mathbf A_l)_{pj}`,

        .. math::

            \mathbb E[w_{pl}] = (\mathbf A_l\mathbf m_l)_p, \qquad
            \operatorname{Cov}[\mathbf w_*] = (\mathbf K_{**}+\sigma_w^2\mathbf I)\otimes\mathbf I_d
            + \mathbf H(\mathbf S-\mathbf I)\mathbf H^\top,

        interleaved (index ``point * d + feature``) like :meth:`GPXModel.predict_weights`, held lazily
        (Kronecker plus rank-:math:`dM`; ``.variance`` costs :math:`O(m\,d^2M^2)`). Features are correlated
        through :math:`\mathbf S` unless :math:`q` is independent per latent.

        :param x: Test inputs :math:`\mathbf x_*`, ``(m, D)``.
        :return: ``MultitaskMultivariateNormal`` with mean ``(m, d)``.
        """
        x = self._check_x(x)
        interp, mean_v, middle, _ = self._weight_terms(x)
        d, m, num = interp.shape
        mean = torch.einsum("lpj,lj->pl", interp, mean_v)
        h = torch.diag_embed(interp.permute(1, 2, 0)).permute(0, 2, 3, 1)  # (m, d, d, M): delta_ll' A_l[p]
        h = h.reshape(m * d, d * num)
        h_mid = torch.einsum("lpj,ljc->plc", interp, self.variational_strategy.full_middle(middle).view(d, num, -1))
        prior = self.base_kernel(x).add_diagonal(self.weight_noise.expand(m))
        eye = IdentityLinearOperator(d, dtype=x.dtype, device=x.device)
        covar = KroneckerProductLinearOperator(prior, eye) + MatmulLinearOperator(h, h_mid.reshape(m * d, -1).mT)
        return MultitaskMultivariateNormal(mean, covar, interleaved=True)

    def weight_blocks(self, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""Mean ``(m, d)`` and per-point covariance ``(m, d, d)`` of :math:`q(\mathbf w_*)` in
        :math:`O(m\,d^2M^2)` (:math:`O(m\,dM^2)` for independent latents), without the joint matrix."""
        x = self._check_x(x)
        interp, mean_v, middle, prior_diag = self._weight_terms(x)
        d = interp.size(0)
        mean = torch.einsum("lpj,lj->pl", interp, mean_v)
        if middle.dim() == 2:
            blocks_mid = middle.view(d, interp.size(-1), d, interp.size(-1))
            blocks = torch.einsum("lpj,ljkq,kpq->plk", interp, blocks_mid, interp)
        else:
            blocks = torch.diag_embed(torch.einsum("lpj,ljq,lpq->pl", interp, middle, interp))
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        return mean, blocks + prior_diag[:, None, None] * eye

    def explain(self, x: Tensor, z: Tensor | None = None) -> GPXExplanation:
        r"""Predictions with per-sample explanations at :math:`(\mathbf x_*, \mathbf z_*)`.

        ``prediction_mean`` / ``prediction_std`` are the mean and std of the likelihood's predictive of
        :math:`y_*`: for a Gaussian likelihood :math:`\mu_*` and :math:`\sqrt{\sigma_*^2+\sigma_y^2}`; for
        ``BernoulliLikelihood`` the class-1 probability :math:`p_* = \Phi(\mu_*/\sqrt{1+\sigma_*^2})` and the
        Bernoulli std :math:`\sqrt{p_*(1-p_*)}`; for likelihoods whose predictive GPyTorch samples, the moments of
        the sample mixture. ``latent_std`` is the std of :math:`f_*` (with the weight noise); the weights and the
        contributions :math:`\mathbf w_*\odot\mathbf z_*` are on the latent scale (for classification the probit
        scale: ``summary()`` and ``plot()`` label the latent sum and :math:`P(y=1)` separately).
        """
        if self.z_dims is None:
            if z is not None:
                raise ValueError("This model was built with z = x (z_dims=None); do not pass z.")
            x = self._check_x(x)
            z = x
        elif z is None:
            raise ValueError(f"This model explains with separate features z (d = {self.z_dims}); pass z.")
        latent = self(x, None if self.z_dims is None else z)
        predictive = self.likelihood(latent)
        mean, var = predictive.mean, predictive.variance
        if mean.dim() > 1:  # a batch of likelihood samples: moments of the mixture
            var = var.mean(0) + mean.var(0, unbiased=False)
            mean = mean.mean(0)
        weights_mean, blocks = self.weight_blocks(x)
        if isinstance(self.likelihood, BernoulliLikelihood):
            outcome, scale = "probability", "probit" if _is_probit_bernoulli(self.likelihood) else "link"
        elif isinstance(self.likelihood, _GaussianLikelihoodBase):
            outcome, scale = "regression", "latent"
        else:
            outcome, scale = "other", "latent"
        return GPXExplanation(
            x=x.detach(),
            z=z.detach(),
            prediction_mean=mean.detach(),
            prediction_std=var.clamp_min(0).sqrt().detach(),
            latent_std=latent.variance.clamp_min(0).sqrt().detach(),
            weights_mean=weights_mean.detach(),
            weights_covariance=blocks.detach(),
            feature_names=self.feature_names,
            outcome=outcome,
            latent_scale=scale,
        )

    # ----------------------------------------------------------------- training
    def _loader(
        self, train_x, train_y, train_z, batch_size: int, shuffle: bool, generator
    ) -> tuple[Iterable, int | None]:
        if torch.is_tensor(train_x):
            if train_y is None:
                raise ValueError("fit(train_x, train_y, ...) needs train_y when train_x is a tensor.")
            inputs = self._make_inputs(train_x, train_z)
            train_y = check_vector("train_y", train_y)
            check_same_rows(train_x=inputs, train_y=train_y)
            if inputs.size(0) == 0:
                raise ValueError("train_x has no rows: nothing to fit.")
            if train_y.dtype != inputs.dtype:
                raise TypeError(f"train_y has dtype {train_y.dtype} but the model is {inputs.dtype}.")
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ValueError(f"batch_size must be a positive int, got {batch_size!r}.")
            dataset = torch.utils.data.TensorDataset(inputs, train_y)
            loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)
            return loader, inputs.size(0)
        if train_y is not None or train_z is not None:
            raise ValueError("With a DataLoader, pass neither train_y nor train_z (the batches carry them).")
        if not isinstance(train_x, Iterable):
            raise TypeError(f"train_x must be a tensor or a DataLoader of batches, got {type(train_x).__name__}.")
        dataset = getattr(train_x, "dataset", None)
        return train_x, (len(dataset) if dataset is not None and hasattr(dataset, "__len__") else None)

    def fit(
        self,
        train_x: Tensor | Iterable,
        train_y: Tensor | None = None,
        train_z: Tensor | None = None,
        num_epochs: int = 10,
        lr: float = 0.01,
        batch_size: int = 1024,
        ngd_lr: float = 0.1,
        objective: str = "gpx",
        num_data: int | None = None,
        shuffle: bool = True,
        generator: torch.Generator | None = None,
        progress: bool = False,
    ) -> VariationalGPXModel:
        r"""Maximise the ELBO by minibatch stochastic optimisation.

        :param train_x: Either a tensor :math:`\mathbf X` (``(n, D)``; with ``train_y`` and, for separate features,
            ``train_z``), minibatched here, or a ``DataLoader`` (any iterable) of batches ``(inputs, y)`` with input
            rows :math:`[\mathbf x\mid\mathbf z]` or ``(x, z, y)``.
        :param num_epochs: Passes over the data.
        :param lr: Adam step size (hyperparameters, inducing points and, unless ``q`` is natural, ``q``).
        :param batch_size: Minibatch size when ``train_x`` is a tensor.
        :param ngd_lr: Natural-gradient step size, used when the variational distribution is natural
            (``variational_distribution="natural"``); then ``q`` is updated by ``gpytorch.optim.NGD``.
        :param objective: ``"gpx"`` (:class:`GPXVariationalELBO`, default) or ``"elbo"`` (GPyTorch's
            ``VariationalELBO``, weight noise inside :math:`q(f)`; looser).
        :param num_data: :math:`n` for the ELBO's scaling (default: the dataset's length).
        :param shuffle, generator: Shuffling of the internal ``DataLoader``.
        :param progress: Show a tqdm progress bar over epochs.
        :return: ``self`` in eval mode; ``self.fit_history`` holds the mean loss (negative ELBO per datum) of each
            epoch.
        """
        objective = objective.lower()
        if objective not in ("gpx", "elbo"):
            raise ValueError(f"objective must be 'gpx' or 'elbo', got {objective!r}.")
        if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 0:
            raise ValueError(f"num_epochs must be a non-negative int, got {num_epochs!r}.")
        loader, size = self._loader(train_x, train_y, train_z, batch_size, shuffle, generator)
        num_data = size if num_data is None else int(num_data)
        if num_data is None or num_data < 1:
            raise ValueError("fit could not infer the number of training samples; pass num_data.")
        mll_class = GPXVariationalELBO if objective == "gpx" else gpytorch.mlls.VariationalELBO
        mll = mll_class(self.likelihood, self, num_data=num_data)

        dist = self.variational_strategy._variational_distribution
        natural = isinstance(dist, _NaturalVariationalDistribution)
        var_ids = {id(p) for p in dist.parameters()}
        others = [p for p in self.parameters() if p.requires_grad and (not natural or id(p) not in var_ids)]
        optimizers: list[torch.optim.Optimizer] = []
        if natural:
            optimizers.append(gpytorch.optim.NGD(list(dist.parameters()), num_data=num_data, lr=ngd_lr))
        if others:
            optimizers.append(torch.optim.Adam(others, lr=lr))

        from tqdm.auto import tqdm

        bernoulli = isinstance(self.likelihood, BernoulliLikelihood)
        scheme: str | None = None  # the label scheme of a Bernoulli likelihood, fixed by the first batch with a -1 or 0
        self.train()
        self.likelihood.train()
        history: list[float] = []
        try:
            # the bar counts epochs, its total num_epochs (one update per epoch)
            epochs = tqdm(
                range(num_epochs), total=num_epochs, desc="variational GPX fit (epochs)", disable=not progress
            )
            for _ in epochs:
                total, count = 0.0, 0
                for number, batch in enumerate(loader):
                    if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
                        raise ValueError("Each batch must be (inputs, y) or (x, z, y).")
                    if torch.is_tensor(batch[-1]) and batch[-1].dim() >= 1 and batch[-1].size(0) == 0:
                        raise ValueError(
                            f"Batch {number} of the DataLoader has zero rows; every minibatch needs at least one row "
                            "(check the sampler / drop_last settings)."
                        )
                    inputs = self._make_inputs(batch[0], batch[1] if len(batch) == 3 else None)
                    target = check_vector("y", batch[-1])
                    check_same_rows(inputs=inputs, y=target)
                    if target.dtype != inputs.dtype:
                        raise TypeError(f"y has dtype {target.dtype} but the model is {inputs.dtype}.")
                    if bernoulli:
                        signs = bernoulli_label_signs(target)
                        scheme = _label_scheme(target, scheme, number)
                        # GPyTorch's BernoulliLikelihood (plain ELBO) takes {0, 1}; ours takes either
                        target = signs.add(1).div(2)
                    for opt in optimizers:
                        opt.zero_grad()
                    loss = -mll(self(inputs), target)
                    loss.backward()
                    for opt in optimizers:
                        opt.step()
                    total += loss.item() * target.size(0)
                    count += target.size(0)
                if count == 0:
                    raise ValueError(
                        "The training data yielded no batches (an empty DataLoader or dataset): nothing to fit."
                    )
                history.append(total / count)
        finally:
            self.eval()
            self.likelihood.eval()
        if history and not math.isfinite(history[-1]):
            warnings.warn(
                "Variational GPX fit ended with a non-finite loss; check the data scaling.",
                RuntimeWarning,
                stacklevel=2,
            )
        self.fit_history = history
        return self
