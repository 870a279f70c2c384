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

from dataclasses import dataclass

import torch
from gpytorch.likelihoods import BernoulliLikelihood, SoftmaxLikelihood
from gpytorch.models import ApproximateGP
from torch import Tensor

from ._probability_links import (
    LINKS,
    _arrange,
    _binary_gradient,
    _binary_taylor,
    _draws,
    _kind,
    _resolve_link,
    _softmax_derivatives,  # noqa: F401 (its import path before the split)
    _softmax_monte_carlo,
    _softmax_probability_mc,
    _softmax_taylor,
)
from ._quadrature import gauss_legendre
from .latent_gradient_moments import LatentGradientMoments, _moments, latent_gradient_moments
from .variational import VariationalConditioning, _check_points, variational_conditioning

__all__ = [
    "LINKS",
    "ExpectedProbabilityAttribution",
    "LatentGradientMoments",
    "expected_probability_gradient",
    "expected_probability_ig",
    "latent_gradient_moments",
]

#: default Gauss–Hermite order of the binary one-dimensional expectations
DEFAULT_GH_ORDER = 64
#: default Gauss–Legendre order of the integrated-gradient path
DEFAULT_PATH_ORDER = 32
#: default number of Monte Carlo draws (softmax)
DEFAULT_NUM_SAMPLES = 4096


# =============================================================================================
# results
# =============================================================================================


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
