#!/usr/bin/env python3
r"""Expected gradients and integrated gradients of the class probabilities of variational GP classifiers.

A GP classifier predicts :math:`p(y \mid \mathbf x) = \sigma(f(\mathbf x))` (binary, ``BernoulliLikelihood``;
:math:`\sigma` the probit link :math:`\Phi` or the logistic :math:`1/(1+e^{-f})`) or
:math:`p_c = \operatorname{softmax}(\mathbf f(\mathbf x))_c` (``SoftmaxLikelihood`` over :math:`C` independent
latent GPs). The probability is a nonlinear function of the latent, so its gradient is not Gaussian under
:math:`q(f)`; what is explained here is its **mean**

.. math::

    \mathbb E_q\Big[\frac{\partial p(y \mid \mathbf x)}{\partial x_i}\Big] = \mathbb E_q[\sigma'(f)\,\partial_i f]
    \quad\text{(binary)}, \qquad
    \mathbb E_q\Big[\frac{\partial p_c}{\partial x_i}\Big] = \sum_k \mathbb E_q\big[J_{ck}(\mathbf f)\,
    \partial_i f_k\big], \quad J_{ck} = p_c(\delta_{ck} - p_k) \quad\text{(softmax)},

and the mean of integrated gradients of the probability along :math:`\mathbf u(t) = \mathbf b + t(\mathbf x -
\mathbf b)`, :math:`\mathbb E[\mathrm{IG}_i] = \Delta_i \int_0^1 \mathbb E[\partial_i p(\mathbf u(t))]\,dt`
(Gauss–Legendre in :math:`t`), which is complete:
:math:`\sum_i \mathbb E[\mathrm{IG}_i] = \mathbb E[p(\mathbf x)] - \mathbb E[p(\mathbf b)]`.

**The joint Gaussian of a latent and its gradient.** At one point, :math:`(f, \partial_1 f, \dots, \partial_D f)`
is jointly Gaussian under :math:`q` (:func:`latent_gradient_moments`): means :math:`\mu_f, \mu_i`, variance
:math:`v`, cross-covariances :math:`c_i = \operatorname{Cov}(\partial_i f, f)`. Conditioning on :math:`f`,
:math:`\mathbb E[\partial_i f \mid f] = \mu_i + (c_i / v)(f - \mu_f)`, so (Proposition 2 of the paper) and by
Stein's lemma :math:`\mathbb E[g(f)(f - \mu_f)] = v\,\mathbb E[g'(f)]`,

.. math::

    \mathbb E[\sigma'(f)\,\partial_i f] = \mu_i\,\mathbb E[\sigma'(f)] + \frac{c_i}{v}\mathbb E[\sigma'(f)(f-\mu_f)]
    = \mu_i\,\mathbb E[\sigma'(f)] + c_i\,\mathbb E[\sigma''(f)],

two one-dimensional expectations (no division by :math:`v`, so exact at :math:`v \to 0`):

* probit, closed form with :math:`s = \sqrt{1 + v}`, :math:`z = \mu_f / s`: :math:`\mathbb E[\Phi(f)] = \Phi(z)`,
  :math:`\mathbb E[\phi(f)] = \phi(z)/s`, :math:`\mathbb E[\phi'(f)] = -\phi(z)\,z/s^2`;
* any link, Gauss–Hermite: :math:`\mathbb E[g(f)] \approx \pi^{-1/2}\sum_k w_k\, g(\mu_f + \sqrt{2v}\,z_k)`.

**Softmax.** The latents are independent, so :math:`\mathbb E[\partial_i f_k \mid \mathbf f] = \mu_{ik} +
(c_{ik}/\sqrt{v_k})\,\xi_k` with :math:`f_k = \mu_k + \sqrt{v_k}\,\xi_k`, and the Monte Carlo estimator averages

.. math::

    g_{ci}(\boldsymbol\xi) = p_c(\mathbf f)\Big(a_{ci} - \sum_k p_k(\mathbf f)\, a_{ki}\Big), \qquad
    a_{ki} = \mu_{ik} + \frac{c_{ik}}{\sqrt{v_k}}\xi_k,

over :math:`\boldsymbol\xi \sim \mathcal N(\mathbf 0, \mathbf I_C)`, reported with its standard error. It
integrates the gradient out exactly given :math:`\mathbf f` (lower variance than sampling
:math:`(\mathbf f, \partial\mathbf f)` jointly), and it is exactly the pathwise (reparameterisation) derivative
:math:`\partial_i\,p_c(\boldsymbol\mu(\mathbf x) + \sqrt{\mathbf v(\mathbf x)}\odot\boldsymbol\xi)`, since
:math:`\partial_i\sqrt{v_k} = c_{ik}/\sqrt{v_k}`.

The paper's **second-order Taylor** (delta-method) approximation expands
:math:`\mathbf f \mapsto \sum_k J_{ck}(\mathbf f)\,\mathbb E[\partial_i f_k \mid f_k]` around :math:`\boldsymbol\mu`:

.. math::

    \mathbb E\Big[\frac{\partial p_c}{\partial x_i}\Big] \approx \sum_l J_{cl}(\boldsymbol\mu)\,\mu_{il}
    + \frac12\sum_{k} v_k \sum_l \frac{\partial^3 p_c}{\partial f_k^2\,\partial f_l}(\boldsymbol\mu)\,\mu_{il}
    + \sum_k \frac{\partial^2 p_c}{\partial f_k^2}(\boldsymbol\mu)\, c_{ik}

(the binary case is the same with one latent: :math:`\sigma'(\mu)\mu_i + \tfrac12 v\,\sigma'''(\mu)\mu_i +
\sigma''(\mu)c_i`, and :math:`\mathbb E[p] \approx p(\boldsymbol\mu) + \tfrac12\sum_k v_k\,\partial^2_{kk}p`).
Every result carries this approximation and its gap to the exact / Monte Carlo mean.

Supported: ``ApproximateGP`` models accepted by
:func:`~gpytorch_explain.attribution.variational.variational_conditioning` (``VariationalStrategy``,
``LargeBatchVariationalStrategy``, ``UnwhitenedVariationalStrategy``; for softmax an
``IndependentMultitaskVariationalStrategy`` around one of them with one latent GP per class). As in
:mod:`~gpytorch_explain.attribution.variational`, :math:`q(f)` excludes the whitened strategies' diagonal jitter
(GPyTorch's ``model(x)`` adds :math:`\epsilon = 10^{-6}` in float64 to the predictive variance).

Example:
    >>> import torch, gpytorch
    >>> from gpytorch_explain.attribution.classification import expected_probability_gradient
    >>> class SVGP(gpytorch.models.ApproximateGP):
    ...     def __init__(self, Z):
    ...         dist = gpytorch.variational.CholeskyVariationalDistribution(Z.size(0))
    ...         super().__init__(gpytorch.variational.VariationalStrategy(self, Z, dist))
    ...         self.mean_module = gpytorch.means.ZeroMean()
    ...         self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=2))
    ...     def forward(self, x):
    ...         return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))
    >>> model = SVGP(torch.rand(8, 2, dtype=torch.float64)).double().eval()
    >>> x = torch.rand(3, 2, dtype=torch.float64)
    >>> res = expected_probability_gradient(model, gpytorch.likelihoods.BernoulliLikelihood(), x)
    >>> res.mean.shape, res.method
    (torch.Size([3, 2]), 'closed-form')
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from gpytorch.likelihoods import BernoulliLikelihood, Likelihood, SoftmaxLikelihood
from gpytorch.models import ApproximateGP
from gpytorch.variational import IndependentMultitaskVariationalStrategy, LMCVariationalStrategy
from linear_operator import to_dense
from torch import Tensor

from ._quadrature import gauss_legendre
from .derived import DerivedCovariance, functional_mean
from .functionals import Gradient
from .variational import VariationalConditioning, _check_points, variational_conditioning

__all__ = [
    "LINKS",
    "ExpectedProbabilityAttribution",
    "LatentGradientMoments",
    "expected_probability_gradient",
    "expected_probability_ig",
    "latent_gradient_moments",
]

#: inverse links of ``BernoulliLikelihood`` that are supported
LINKS: tuple[str, ...] = ("probit", "logit")
#: default Gauss–Hermite order of the binary one-dimensional expectations
DEFAULT_GH_ORDER = 64
#: default Gauss–Legendre order of the integrated-gradient path
DEFAULT_PATH_ORDER = 32
#: default number of Monte Carlo draws (softmax)
DEFAULT_NUM_SAMPLES = 4096

_SUPPORTED = (
    "supported: BernoulliLikelihood (probit link, or logit via link='logit') with a single-output ApproximateGP, "
    "and SoftmaxLikelihood(num_classes=C, mixing_weights=False) with an ApproximateGP whose "
    "IndependentMultitaskVariationalStrategy has num_tasks == C; the base strategy must be a VariationalStrategy, "
    "LargeBatchVariationalStrategy or UnwhitenedVariationalStrategy"
)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# =============================================================================================
# results
# =============================================================================================
@dataclass(frozen=True)
class LatentGradientMoments:
    r"""The joint Gaussian of :math:`(f(\mathbf x_p), \partial_1 f(\mathbf x_p), \dots, \partial_D f(\mathbf x_p))`
    under :math:`q`, per point (no cross-point covariances).

    Leading ``*batch`` dimensions are the model's (``(C,)`` for independent multitask latents).

    :param mean: :math:`\mu_f = \mathbb E[f(\mathbf x_p)]`, ``(*batch, m)``.
    :param variance: :math:`v = \operatorname{Var} f(\mathbf x_p)`, ``(*batch, m)``.
    :param gradient_mean: :math:`\mu_i = \mathbb E[\partial_i f(\mathbf x_p)]`, ``(*batch, m, D)``.
    :param gradient_cross: :math:`c_i = \operatorname{Cov}(\partial_i f(\mathbf x_p), f(\mathbf x_p))`,
        ``(*batch, m, D)``.
    :param gradient_covariance: :math:`\operatorname{Cov}(\partial_i f, \partial_j f)` at each point,
        ``(*batch, m, D, D)`` (only with ``full=True``).
    """

    mean: Tensor
    variance: Tensor
    gradient_mean: Tensor
    gradient_cross: Tensor
    gradient_covariance: Tensor | None = None

    def joint_covariance(self) -> Tensor:
        r"""The ``(D+1) x (D+1)`` covariance of :math:`(f, \partial_1 f, \dots, \partial_D f)` per point,
        ``(*batch, m, D + 1, D + 1)`` (needs ``full=True``)."""
        if self.gradient_covariance is None:
            raise ValueError("joint_covariance needs the gradient covariance: call latent_gradient_moments(full=True).")
        top = torch.cat([self.variance.unsqueeze(-1), self.gradient_cross], dim=-1).unsqueeze(-2)
        bottom = torch.cat([self.gradient_cross.unsqueeze(-1), self.gradient_covariance], dim=-1)
        return torch.cat([top, bottom], dim=-2)


@dataclass(frozen=True)
class ExpectedProbabilityAttribution:
    r"""Expected gradient / integrated gradients of the predicted class probability.

    Shapes: ``(m, D)`` for a binary classifier (the probability of :math:`y = 1`), ``(m, C, D)`` for softmax
    (row ``c``: the probability of class ``c``).

    :param mean: The expected attribution, by ``method``.
    :param method: ``"closed-form"`` (probit), ``"gauss-hermite"``, ``"monte-carlo"`` or ``"taylor"``.
    :param standard_error: Monte Carlo standard error of ``mean`` (``None`` for deterministic methods).
    :param probability: :math:`\mathbb E_q[p(y \mid \mathbf x)]` by the same method, ``(m,)`` or ``(m, C)``.
    :param taylor: The paper's second-order Taylor approximation of ``mean``.
    :param taylor_gap: ``taylor - mean`` (zero when ``method == "taylor"``).
    :param probability_standard_error: Monte Carlo standard error of ``probability``.
    :param baseline_probability: IG only: :math:`\mathbb E_q[p(y \mid \mathbf b_r)]`, ``(k,)`` or ``(k, C)``.
    :param completeness_gap: IG only: :math:`\sum_i \mathbb E[\mathrm{IG}_i] - (\mathbb E[p(\mathbf x)] -
        \overline{\mathbb E[p(\mathbf b)]})`, ``(m,)`` or ``(m, C)``: round-off plus the path quadrature error
        for the deterministic methods; of the order of the standard errors for Monte Carlo.
    :param num_samples: Monte Carlo draws used (``None`` otherwise).
    """

    mean: Tensor
    method: str
    standard_error: Tensor | None
    probability: Tensor
    taylor: Tensor
    taylor_gap: Tensor
    probability_standard_error: Tensor | None = None
    baseline_probability: Tensor | None = None
    completeness_gap: Tensor | None = None
    num_samples: int | None = None


# =============================================================================================
# the joint Gaussian of (f, ∇f)
# =============================================================================================
def _check_model(model) -> None:
    if not isinstance(model, ApproximateGP):
        raise NotImplementedError(
            f"Classification attributions need a variational model (gpytorch ApproximateGP), got "
            f"{type(model).__name__}; {_SUPPORTED}."
        )


def latent_gradient_moments(model: ApproximateGP, x: Tensor, full: bool = False, chunk_size: int = 256):
    r"""Per-point joint Gaussian of the latent and its gradient under the variational posterior :math:`q`.

    With the whitened quantities of :func:`~gpytorch_explain.attribution.variational.variational_conditioning`
    (:math:`\mathbf L`, :math:`\mathbf a`, :math:`\mathbf M = \mathbf I - \mathbf S_w`),
    :math:`\mathbf v_f = \mathbf L^{-1}\mathbf k(\mathbf Z, \mathbf x)` and
    :math:`\mathbf v_i = \mathbf L^{-1}\partial_i\mathbf k(\mathbf Z, \mathbf x)`:

    .. math::

        \mu_f = \mu(\mathbf x) + \mathbf k(\mathbf x, \mathbf Z)\mathbf a, \quad
        \mu_i = \partial_i\mu(\mathbf x) + \partial_i\mathbf k(\mathbf x, \mathbf Z)\mathbf a, \quad
        v = k(\mathbf x, \mathbf x) - \mathbf v_f^\top\mathbf M\mathbf v_f, \quad
        c_i = \partial_i k(\mathbf x, \mathbf x')\big|_{\mathbf x' = \mathbf x} - \mathbf v_i^\top\mathbf M\mathbf v_f .

    :param model: A supported ``ApproximateGP`` in eval mode.
    :param x: Points ``(m, D)`` in the model's dtype.
    :param full: Also return the per-point gradient covariances ``(*batch, m, D, D)``.
    :param chunk_size: Points per block (bounds the memory of the prior cross-covariances).
    :return: :class:`LatentGradientMoments` (detached).

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain.attribution.classification import latent_gradient_moments
        >>> class SVGP(gpytorch.models.ApproximateGP):
        ...     def __init__(self, Z):
        ...         dist = gpytorch.variational.CholeskyVariationalDistribution(Z.size(0))
        ...         super().__init__(gpytorch.variational.VariationalStrategy(self, Z, dist))
        ...         self.mean_module = gpytorch.means.ConstantMean()
        ...         self.covar_module = gpytorch.kernels.RBFKernel()
        ...     def forward(self, x):
        ...         return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))
        >>> model = SVGP(torch.rand(6, 3, dtype=torch.float64)).double().eval()
        >>> mom = latent_gradient_moments(model, torch.rand(4, 3, dtype=torch.float64), full=True)
        >>> mom.mean.shape, mom.gradient_cross.shape, mom.joint_covariance().shape
        (torch.Size([4]), torch.Size([4, 3]), torch.Size([4, 4, 4]))
    """
    _check_model(model)
    if isinstance(getattr(model, "variational_strategy", None), LMCVariationalStrategy):
        raise NotImplementedError(
            "latent_gradient_moments takes a single latent GP or independent ones; for LMCVariationalStrategy models "
            "use PosteriorGradient (per task) or gpytorch_explain.attribution.lmc.lmc_joint_functional_posterior."
        )
    with torch.no_grad():
        cond = variational_conditioning(model)
        x = _check_points(x, cond.inducing_points)
        if x.dim() != 2:
            raise ValueError(f"x must be (m, D), got shape {tuple(x.shape)}.")
        return _moments(cond, x, full=full, chunk_size=chunk_size)


def _moments(cond: VariationalConditioning, x: Tensor, full: bool, chunk_size: int) -> LatentGradientMoments:
    parts = [_moments_block(cond, x[s : s + chunk_size], full) for s in range(0, x.size(0), max(1, chunk_size))]
    if not parts:
        raise ValueError("x has no points.")
    cat = [torch.cat([p[j] for p in parts], dim=dim) for j, dim in enumerate((-1, -1, -2, -2))]
    cov = torch.cat([p[4] for p in parts], dim=-3) if full else None
    return LatentGradientMoments(*cat, gradient_covariance=cov)


def _moments_block(cond: VariationalConditioning, x: Tensor, full: bool) -> tuple[Tensor, ...]:
    kernel, mean_module = cond.kernel, cond.mean_module
    Z, L, a, M = cond.inducing_points, cond.cholesky, cond.weights, cond.middle
    m, D = x.shape
    derived = DerivedCovariance(kernel, Gradient())
    rows = derived.cross(x, Z)  # (*b, m, D, u)
    cross = to_dense(kernel(Z, x))  # (*b, u, m)
    prior_var = to_dense(kernel(x, diag=True))  # (*b, m)
    prior_c = torch.diagonal(derived.cross(x, x), dim1=-3, dim2=-1).mT  # (*b, m, D)
    batch = torch.broadcast_shapes(
        rows.shape[:-3], cross.shape[:-2], prior_var.shape[:-1], L.shape[:-2], a.shape[:-1], M.shape[:-2]
    )
    u = L.size(-1)
    rows = rows.expand(*batch, m, D, u)
    cross = cross.expand(*batch, u, m)
    L = L.expand(*batch, u, u)
    M = M.expand(*batch, u, u)
    a = a.expand(*batch, u)

    f_mean = (cross.mT @ a.unsqueeze(-1)).squeeze(-1)
    g_mean = (rows @ a[..., None, :, None]).squeeze(-1)
    if mean_module is not None:
        f_mean = f_mean + mean_module(x)
        g_mean = g_mean + functional_mean(mean_module, Gradient(), x)
    Vf = torch.linalg.solve_triangular(L, cross, upper=False)  # (*b, u, m)
    MVf = M @ Vf
    f_var = (prior_var - (Vf * MVf).sum(-2)).clamp_min(0.0)
    Vg = torch.linalg.solve_triangular(L, rows.reshape(*batch, m * D, u).mT, upper=False)
    Vg = Vg.mT.reshape(*batch, m, D, u)
    g_cross = prior_c - (Vg * MVf.mT.unsqueeze(-2)).sum(-1)
    out = [f_mean.expand(*batch, m), f_var.expand(*batch, m), g_mean.expand(*batch, m, D), g_cross]
    if full:
        cov = derived.point(x) - Vg @ M.unsqueeze(-3) @ Vg.mT
        out.append(0.5 * (cov + cov.mT))
    return tuple(out)


# =============================================================================================
# likelihoods
# =============================================================================================
def _link(name: str, f: Tensor, n: int) -> list[Tensor]:
    """The link and its first ``n`` derivatives at ``f``."""
    if name == "probit":
        phi = _INV_SQRT_2PI * torch.exp(-0.5 * f * f)
        out = [torch.special.ndtr(f), phi, -f * phi, (f * f - 1.0) * phi]
    else:
        s = torch.sigmoid(f)
        d1 = s * (1.0 - s)
        out = [s, d1, d1 * (1.0 - 2.0 * s), d1 * (1.0 - 6.0 * s + 6.0 * s * s)]
    return out[: n + 1]


def _resolve_link(likelihood: BernoulliLikelihood, link: str | None) -> str:
    """The link of a Bernoulli likelihood, checked against its own ``forward`` where that can be evaluated."""
    if link is not None and link not in LINKS:
        raise ValueError(f"link must be one of {LINKS} (or None to read it off the likelihood), got {link!r}.")
    grid = torch.linspace(-4.0, 4.0, 17, dtype=torch.float64)
    try:
        probs = likelihood.forward(grid).probs.detach().to(torch.float64).cpu()
    except Exception:  # a likelihood whose forward cannot run on a plain tensor: trust the caller
        probs = None
    matches = [] if probs is None else [n for n in LINKS if torch.allclose(probs, _link(n, grid, 0)[0], atol=1e-6)]
    if link is None:
        if not matches:
            raise NotImplementedError(
                f"Could not identify the inverse link of {type(likelihood).__name__} (its forward(f) is neither "
                f"Φ(f) nor 1/(1+exp(-f))); {_SUPPORTED}."
            )
        return matches[0]
    if probs is not None and link not in matches:
        raise ValueError(
            f"link={link!r} does not match {type(likelihood).__name__}.forward "
            f"({'the ' + matches[0] + ' link' if matches else 'an unsupported link'}); GPyTorch's "
            "BernoulliLikelihood is probit."
        )
    return link


def _kind(model, likelihood: Likelihood) -> str:
    _check_model(model)
    strategy = getattr(model, "variational_strategy", None)
    if isinstance(strategy, LMCVariationalStrategy):
        raise NotImplementedError(
            "Class-probability attributions of LMCVariationalStrategy models are not supported (their class latents "
            f"are correlated); {_SUPPORTED}. Latent attributions of LMC models: PosteriorGradient / "
            "IntegratedGradients (per task) and gpytorch_explain.attribution.lmc.lmc_joint_functional_posterior."
        )
    multitask = isinstance(strategy, IndependentMultitaskVariationalStrategy)
    if isinstance(likelihood, SoftmaxLikelihood):
        if getattr(likelihood, "mixing_weights", None) is not None:
            raise NotImplementedError(f"SoftmaxLikelihood with mixing weights is not supported; {_SUPPORTED}.")
        if not multitask or strategy.num_tasks != likelihood.num_classes:
            tasks = strategy.num_tasks if multitask else "no IndependentMultitaskVariationalStrategy"
            raise NotImplementedError(
                f"SoftmaxLikelihood with {likelihood.num_classes} classes needs one independent latent GP per class "
                f"(model has {tasks}); {_SUPPORTED}."
            )
        return "softmax"
    if isinstance(likelihood, BernoulliLikelihood):
        if multitask:
            raise NotImplementedError(f"BernoulliLikelihood needs a single latent GP; {_SUPPORTED}.")
        return "bernoulli"
    raise NotImplementedError(f"Unsupported likelihood {type(likelihood).__name__}; {_SUPPORTED}.")


def _arrange(mom: LatentGradientMoments, kind: str, num_classes: int | None) -> LatentGradientMoments:
    """Check the batch shape and, for softmax, move the class dimension after the points."""
    batch = mom.mean.shape[:-1]
    if kind == "bernoulli":
        if batch != torch.Size():
            raise NotImplementedError(f"Batched models (batch shape {tuple(batch)}) are not supported; {_SUPPORTED}.")
        return mom
    if batch != torch.Size([num_classes]):
        raise NotImplementedError(
            f"The latent batch shape {tuple(batch)} is not ({num_classes},) (one GP per class, task_dim=-1); "
            f"{_SUPPORTED}."
        )
    return LatentGradientMoments(
        mean=mom.mean.mT,
        variance=mom.variance.mT,
        gradient_mean=mom.gradient_mean.movedim(0, -2),
        gradient_cross=mom.gradient_cross.movedim(0, -2),
    )


# =============================================================================================
# binary: one-dimensional expectations
# =============================================================================================
def _binary_expectations(link: str, mean: Tensor, var: Tensor, method: str, order: int) -> tuple[Tensor, ...]:
    r""":math:`(\mathbb E\sigma(f), \mathbb E\sigma'(f), \mathbb E\sigma''(f))`, :math:`f \sim \mathcal N(\mu, v)`."""
    if method == "closed-form":
        s = torch.sqrt(1.0 + var)
        z = mean / s
        phi = _INV_SQRT_2PI * torch.exp(-0.5 * z * z)
        return torch.special.ndtr(z), phi / s, -phi * z / (1.0 + var)
    nodes, weights = np.polynomial.hermite.hermgauss(order)
    nodes = torch.as_tensor(nodes, dtype=mean.dtype, device=mean.device)
    weights = torch.as_tensor(weights / math.sqrt(math.pi), dtype=mean.dtype, device=mean.device)
    f = mean.unsqueeze(-1) + torch.sqrt(2.0 * var).unsqueeze(-1) * nodes
    return tuple((d * weights).sum(-1) for d in _link(link, f, 2))


def _binary_gradient(link: str, mom: LatentGradientMoments, method: str, order: int) -> tuple[Tensor, Tensor]:
    r"""Expected probability ``(P,)`` and gradient ``(P, D)``: :math:`\mu_i\mathbb E\sigma' + c_i\mathbb E\sigma''`."""
    if method == "taylor":
        return _binary_taylor(link, mom)
    e0, e1, e2 = _binary_expectations(link, mom.mean, mom.variance, method, order)
    return e0, mom.gradient_mean * e1.unsqueeze(-1) + mom.gradient_cross * e2.unsqueeze(-1)


def _binary_taylor(link: str, mom: LatentGradientMoments) -> tuple[Tensor, Tensor]:
    d0, d1, d2, d3 = _link(link, mom.mean, 3)
    v = mom.variance
    prob = d0 + 0.5 * v * d2
    grad = mom.gradient_mean * (d1 + 0.5 * v * d3).unsqueeze(-1) + mom.gradient_cross * d2.unsqueeze(-1)
    return prob, grad


# =============================================================================================
# softmax: Monte Carlo and Taylor
# =============================================================================================
def _softmax_derivatives(mu: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""At :math:`\boldsymbol\mu` (``(P, C)``): :math:`p`, :math:`J_{cl} = \partial_l p_c`,
    :math:`T_{ck} = \partial^2_{kk} p_c` and :math:`U_{ckl} = \partial_l\partial^2_{kk} p_c`.

    With :math:`s_{cj} = \delta_{cj} - p_j`: :math:`J_{cl} = p_c s_{cl}`,
    :math:`T_{ck} = p_c(s_{ck}^2 - p_k + p_k^2)` and
    :math:`U_{ckl} = p_c\big(s_{cl}(s_{ck}^2 - p_k + p_k^2) - p_k(\delta_{kl} - p_l)(2s_{ck} + 1 - 2p_k)\big)`.
    """
    p = torch.softmax(mu, dim=-1)  # (P, C)
    C = p.size(-1)
    eye = torch.eye(C, dtype=p.dtype, device=p.device)
    s = eye - p.unsqueeze(-2)  # s[P, c, j] = δ_cj − p_j
    pc = p.unsqueeze(-1)  # (P, c, 1)
    J = pc * s
    inner = s * s - p.unsqueeze(-2) + (p * p).unsqueeze(-2)  # (P, c, k)
    T = pc * inner
    dp = p.unsqueeze(-1) * (eye - p.unsqueeze(-2))  # dp[P, k, l] = ∂_l p_k = p_k(δ_kl − p_l)
    U = pc.unsqueeze(-1) * (
        s.unsqueeze(-2) * inner.unsqueeze(-1)  # s_cl · inner_ck  -> (P, c, k, l)
        - dp.unsqueeze(-3) * (2.0 * s + 1.0 - 2.0 * p.unsqueeze(-2)).unsqueeze(-1)
    )
    return p, J, T, U


def _softmax_taylor(mom: LatentGradientMoments) -> tuple[Tensor, Tensor]:
    """Taylor approximations of the expected probabilities ``(P, C)`` and their gradients ``(P, C, D)``."""
    p, J, T, U = _softmax_derivatives(mom.mean)
    v = mom.variance  # (P, C)
    prob = p + 0.5 * (T * v.unsqueeze(-2)).sum(-1)
    R = 0.5 * (U * v[..., None, :, None]).sum(-2)  # (P, c, l)
    grad = (J + R) @ mom.gradient_mean + T @ mom.gradient_cross
    return prob, grad


def _softmax_monte_carlo(
    mom: LatentGradientMoments, node_weights: Tensor, xi: Tensor, max_elements: int = 2**22
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""Rao–Blackwellised Monte Carlo of :math:`\sum_n w_{npi}\,\mathbb E[\partial_i p_c(\text{node } n)]` per point.

    ``mom`` holds ``N x m`` nodes (``(N, m, C)`` / ``(N, m, C, D)``), ``node_weights`` is ``(N, m, D)``, ``xi``
    ``(S, m, C)`` standard normal draws shared by the nodes of a point. Returns the mean and standard error
    ``(m, C, D)`` of the weighted sum, and those of the probability at the first node (``(m, C)``).
    """
    N, m, C = mom.mean.shape
    D = mom.gradient_mean.size(-1)
    S = xi.size(0)
    sd = mom.variance.sqrt()
    safe = torch.where(sd > 0, sd, torch.ones_like(sd))
    beta = torch.where((sd > 0).unsqueeze(-1), mom.gradient_cross / safe.unsqueeze(-1), 0.0)  # (N, m, C, D)
    step = max(1, max_elements // max(1, N * m * C * D))
    acc = [torch.zeros(m, C, D, dtype=xi.dtype, device=xi.device) for _ in range(2)]
    pacc = [torch.zeros(m, C, dtype=xi.dtype, device=xi.device) for _ in range(2)]
    for s0 in range(0, S, step):
        e = xi[s0 : s0 + step].unsqueeze(1)  # (s, 1, m, C)
        p = torch.softmax(mom.mean + sd * e, dim=-1)  # (s, N, m, C)
        a = mom.gradient_mean + beta * e.unsqueeze(-1)  # (s, N, m, C, D)
        pa = (p.unsqueeze(-1) * a).sum(-2, keepdim=True)  # (s, N, m, 1, D)
        g = p.unsqueeze(-1) * (a - pa)  # (s, N, m, C, D)
        est = (g * node_weights.unsqueeze(-2)).sum(1)  # (s, m, C, D)
        acc[0] += est.sum(0)
        acc[1] += (est * est).sum(0)
        p0 = p[:, 0]
        pacc[0] += p0.sum(0)
        pacc[1] += (p0 * p0).sum(0)

    def _mean_se(total: Tensor, squares: Tensor) -> tuple[Tensor, Tensor]:
        mean = total / S
        var = (squares / S - mean * mean).clamp_min(0.0) * (S / max(S - 1, 1))
        return mean, (var / S).sqrt()

    return (*_mean_se(*acc), *_mean_se(*pacc))


def _softmax_probability_mc(mean: Tensor, var: Tensor, xi: Tensor, max_elements: int = 2**22):
    r"""Monte Carlo mean and standard error of :math:`\operatorname{softmax}(\boldsymbol\mu + \sqrt{\mathbf v}
    \odot\boldsymbol\xi)` for nodes ``(N, m, C)`` and draws ``xi`` ``(S, m, C)`` shared by the nodes of a point."""
    S = xi.size(0)
    sd = var.sqrt()
    step = max(1, max_elements // max(1, mean.numel()))
    total = torch.zeros_like(mean)
    squares = torch.zeros_like(mean)
    for s0 in range(0, S, step):
        p = torch.softmax(mean + sd * xi[s0 : s0 + step].unsqueeze(1), dim=-1)
        total += p.sum(0)
        squares += (p * p).sum(0)
    avg = total / S
    spread = (squares / S - avg * avg).clamp_min(0.0) * (S / max(S - 1, 1))
    return avg, (spread / S).sqrt()


def _draws(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    return torch.randn(shape, generator=generator, dtype=like.dtype).to(like.device)


# =============================================================================================
# public API
# =============================================================================================
def _method(kind: str, link: str | None, method: str | None) -> str:
    allowed = ("exact", "gauss-hermite", "taylor") if kind == "bernoulli" else ("monte-carlo", "taylor")
    if method is None:
        method = allowed[0]
    if method not in allowed:
        raise ValueError(f"method must be one of {allowed} for {kind} likelihoods, got {method!r}.")
    if method == "exact":
        return "closed-form" if link == "probit" else "gauss-hermite"
    return method


def _setup(model, likelihood, x, link, method, gh_order, num_samples):
    kind = _kind(model, likelihood)
    link = _resolve_link(likelihood, link) if kind == "bernoulli" else None
    if kind == "softmax" and link is not None:
        raise ValueError("link applies to BernoulliLikelihood only.")
    method = _method(kind, link, method)
    if int(gh_order) < 1 or int(num_samples) < 2:
        raise ValueError("gh_order must be >= 1 and num_samples >= 2.")
    num_classes = likelihood.num_classes if kind == "softmax" else None
    cond = variational_conditioning(model)
    x = _check_points(x, cond.inducing_points)
    if x.dim() != 2 or x.size(0) == 0:
        raise ValueError(f"x must be (m, D) with m >= 1, got shape {tuple(x.shape)}.")
    return kind, link, method, num_classes, cond, x


def expected_probability_gradient(
    model: ApproximateGP,
    likelihood: BernoulliLikelihood | SoftmaxLikelihood,
    x: Tensor,
    *,
    link: str | None = None,
    method: str | None = None,
    gh_order: int = DEFAULT_GH_ORDER,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    generator: torch.Generator | None = None,
) -> ExpectedProbabilityAttribution:
    r"""The expected gradient of the predicted class probability, :math:`\mathbb E_q[\nabla_{\mathbf x}
    p(y \mid \mathbf x)]` (see the module docstring for the formulas).

    :param model: A variational GP classifier in eval mode (see the module docstring for the supported ones).
    :param likelihood: ``BernoulliLikelihood`` (the probability of :math:`y = 1`) or ``SoftmaxLikelihood``
        (``mixing_weights=False``; every class probability).
    :param x: Points ``(m, D)`` in the model's dtype.
    :param link: Bernoulli only: ``"probit"`` or ``"logit"``; ``None`` reads it off ``likelihood.forward``
        (GPyTorch's ``BernoulliLikelihood`` is probit; a subclass with a logistic ``forward`` is logit). An
        explicit link must agree with ``likelihood.forward``.
    :param method: Bernoulli: ``"exact"`` (default: closed form for probit, Gauss–Hermite for logit),
        ``"gauss-hermite"`` or ``"taylor"``; softmax: ``"monte-carlo"`` (default) or ``"taylor"``.
    :param gh_order: Gauss–Hermite order.
    :param num_samples: Monte Carlo draws :math:`\boldsymbol\xi`, drawn as
        ``torch.randn(num_samples, m, C, generator=generator, dtype=x.dtype)``.
    :param generator: Random generator for the draws (reproducibility).
    :return: :class:`ExpectedProbabilityAttribution`, mean ``(m, D)`` or ``(m, C, D)``, with the Taylor
        approximation and its gap to ``mean`` (and Monte Carlo standard errors).
    :raises NotImplementedError: unsupported model, strategy or likelihood (the message names what is supported).
    """
    with torch.no_grad():
        kind, link, method, C, cond, x = _setup(model, likelihood, x, link, method, gh_order, num_samples)
        mom = _arrange(_moments(cond, x, full=False, chunk_size=256), kind, C)
        if kind == "bernoulli":
            prob, grad = _binary_gradient(link, mom, method, int(gh_order))
            t_prob, t_grad = _binary_taylor(link, mom)
            return ExpectedProbabilityAttribution(
                mean=grad, method=method, standard_error=None, probability=prob, taylor=t_grad,
                taylor_gap=t_grad - grad,
            )  # fmt: skip
        t_prob, t_grad = _softmax_taylor(mom)
        if method == "taylor":
            return ExpectedProbabilityAttribution(
                mean=t_grad, method=method, standard_error=None, probability=t_prob, taylor=t_grad,
                taylor_gap=torch.zeros_like(t_grad),
            )  # fmt: skip
        xi = _draws((int(num_samples), x.size(0), C), generator, x)
        nodes = _stack_nodes(mom, 1)
        ones = torch.ones(1, x.size(0), x.size(1), dtype=x.dtype, device=x.device)
        grad, se, prob, prob_se = _softmax_monte_carlo(nodes, ones, xi)
        return ExpectedProbabilityAttribution(
            mean=grad, method=method, standard_error=se, probability=prob, taylor=t_grad, taylor_gap=t_grad - grad,
            probability_standard_error=prob_se, num_samples=int(num_samples),
        )  # fmt: skip


def _stack_nodes(mom: LatentGradientMoments, N: int) -> LatentGradientMoments:
    """Reshape flat ``(N*m, ...)`` moments to ``(N, m, ...)``."""
    return LatentGradientMoments(
        mean=mom.mean.reshape(N, -1, *mom.mean.shape[1:]),
        variance=mom.variance.reshape(N, -1, *mom.variance.shape[1:]),
        gradient_mean=mom.gradient_mean.reshape(N, -1, *mom.gradient_mean.shape[1:]),
        gradient_cross=mom.gradient_cross.reshape(N, -1, *mom.gradient_cross.shape[1:]),
    )


def _baselines(baseline, cond: VariationalConditioning, x: Tensor) -> Tensor:
    D = x.size(-1)
    if baseline is None:
        return cond.inducing_points.detach().reshape(-1, D).mean(0, keepdim=True)
    if not torch.is_tensor(baseline):
        raise TypeError(f"baseline must be a torch.Tensor, got {type(baseline).__name__}.")
    b = baseline.unsqueeze(0) if baseline.dim() == 1 else baseline
    if b.dim() != 2 or b.size(-1) != D or b.size(0) == 0:
        raise ValueError(f"baseline must have shape (D,) or (k, D) with D = {D}, got {tuple(baseline.shape)}.")
    if b.dtype != x.dtype:
        raise TypeError(f"baseline must have the model's dtype {x.dtype}, got {b.dtype}.")
    if not torch.isfinite(b).all():
        raise ValueError("baseline contains NaN or infinite values.")
    return b.to(x.device)


def expected_probability_ig(
    model: ApproximateGP,
    likelihood: BernoulliLikelihood | SoftmaxLikelihood,
    x: Tensor,
    baseline: Tensor | None = None,
    *,
    link: str | None = None,
    method: str | None = None,
    path_order: int = DEFAULT_PATH_ORDER,
    gh_order: int = DEFAULT_GH_ORDER,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    generator: torch.Generator | None = None,
) -> ExpectedProbabilityAttribution:
    r"""The expected integrated gradients of the predicted class probability.

    .. math::

        \mathbb E[\mathrm{IG}_i(\mathbf x)] = \frac1k\sum_{r=1}^k (x_i - b^{(r)}_i)\sum_{j} w_j\,
        \mathbb E\big[\partial_i p\big(\mathbf b^{(r)} + t_j(\mathbf x - \mathbf b^{(r)})\big)\big]

    with Gauss–Legendre nodes :math:`(t_j, w_j)` on :math:`[0, 1]` (``path_order`` of them) and the expected
    gradient of :func:`expected_probability_gradient` at every node. The result's ``completeness_gap`` is
    :math:`\sum_i \mathbb E[\mathrm{IG}_i] - (\mathbb E[p(\mathbf x)] - \frac1k\sum_r\mathbb E[p(\mathbf b^{(r)})])`,
    the path quadrature error for the deterministic methods (and for ``"taylor"``, whose gradient is the exact
    derivative of its probability approximation). For softmax Monte Carlo the draws :math:`\boldsymbol\xi`
    (``(num_samples, m, C)``) are shared by all path nodes and baselines of a point, so the standard errors are
    those of the whole path sum and completeness holds draw by draw (the gap is the quadrature error, not the
    sampling error); ``baseline_probability`` averages the per-point estimates.

    :param baseline: ``None`` (the mean of the inducing points), ``(D,)`` or ``(k, D)`` (expected IG over the
        baselines).
    :param path_order: Gauss–Legendre order along the path.
    :return: :class:`ExpectedProbabilityAttribution` (other parameters as in :func:`expected_probability_gradient`).
    """
    with torch.no_grad():
        kind, link, method, C, cond, x = _setup(model, likelihood, x, link, method, gh_order, num_samples)
        if int(path_order) < 1:
            raise ValueError("path_order must be >= 1.")
        b = _baselines(baseline, cond, x)
        k, (m, D) = b.size(0), x.shape
        t, w = gauss_legendre(int(path_order), x)
        delta = x.unsqueeze(0) - b.unsqueeze(1)  # (k, m, D)
        points = b[:, None, None, :] + t[None, :, None, None] * delta.unsqueeze(1)  # (k, J, m, D)
        weights = (w[None, :, None, None] * delta.unsqueeze(1) / k).reshape(-1, m, D)  # (N, m, D)
        N = weights.size(0)
        ends = torch.cat([x, b], dim=0)
        mom = _arrange(_moments(cond, points.reshape(-1, D), full=False, chunk_size=256), kind, C)
        mom_ends = _arrange(_moments(cond, ends, full=False, chunk_size=256), kind, C)
        if kind == "bernoulli":
            _, grad = _binary_gradient(link, mom, method, int(gh_order))
            ig = (grad.reshape(N, m, D) * weights).sum(0)
            _, t_grad = _binary_taylor(link, mom)
            t_ig = (t_grad.reshape(N, m, D) * weights).sum(0)
            prob, _ = _binary_gradient(link, mom_ends, method, int(gh_order))
        else:
            _, t_grad = _softmax_taylor(mom)
            t_ig = (t_grad.reshape(N, m, C, D) * weights.unsqueeze(-2)).sum(0)
            if method == "taylor":
                ig = t_ig
                prob, _ = _softmax_taylor(mom_ends)
            else:
                xi = _draws((int(num_samples), m, C), generator, x)
                ig, se, _, _ = _softmax_monte_carlo(_stack_nodes(mom, N), weights, xi)
                # E[p] at x and at every baseline with each point's own draws ξ: completeness then holds draw by
                # draw (the estimator is the pathwise derivative of p(μ + √v ξ)), up to the path quadrature
                means = torch.cat([mom_ends.mean[None, :m], mom_ends.mean[m:, None].expand(k, m, C)])
                variances = torch.cat([mom_ends.variance[None, :m], mom_ends.variance[m:, None].expand(k, m, C)])
                probs, probs_se = _softmax_probability_mc(means, variances, xi)  # (1 + k, m, C)
                gap = ig.sum(-1) - (probs[0] - probs[1:].mean(0))
                return ExpectedProbabilityAttribution(
                    mean=ig, method=method, standard_error=se, probability=probs[0], taylor=t_ig,
                    taylor_gap=t_ig - ig, probability_standard_error=probs_se[0],
                    baseline_probability=probs[1:].mean(1), completeness_gap=gap, num_samples=int(num_samples),
                )  # fmt: skip
        prob_x, prob_b = prob[:m], prob[m:]
        gap = ig.sum(-1) - (prob_x - prob_b.mean(0))
        return ExpectedProbabilityAttribution(
            mean=ig, method=method, standard_error=None, probability=prob_x, taylor=t_ig, taylor_gap=t_ig - ig,
            baseline_probability=prob_b, completeness_gap=gap,
        )  # fmt: skip
