#!/usr/bin/env python3
r"""Class-probability attributions with credible intervals: their distribution under :math:`q`, by joint sampling.

The gradient of a class probability, :math:`\partial_i p = \sigma'(f)\,\partial_i f` (binary) or
:math:`\partial_i p_c = p_c(\partial_i f_c - \sum_k p_k\,\partial_i f_k)` (softmax), is a nonlinear function of
the jointly Gaussian :math:`(f, \nabla f)`, so it is not Gaussian; its mean is in
:mod:`~gpytorch_explain.attribution.classification`. Here its whole distribution is represented by draws:

* **gradient**: at each point :math:`\mathbf x_p`, :math:`(f, \partial_1 f, \dots, \partial_D f)` (per latent) is
  drawn from its exact :math:`(D+1)`-dimensional joint Gaussian under :math:`q`, and :math:`\partial_i p` is
  evaluated per draw;
* **integrated gradients**: along :math:`\mathbf u(t) = \mathbf b + t(\mathbf x - \mathbf b)` with Gauss–Legendre
  nodes :math:`t_j` (weights :math:`w_j`), the values and gradients of the latent at all nodes (and at
  :math:`\mathbf x` and :math:`\mathbf b`) are drawn jointly, a :math:`N(1+D)`-dimensional Gaussian whose
  covariances across nodes are those of the variational posterior, and per draw

  .. math:: \mathrm{IG}_i = \frac1k\sum_r (x_i - b^{(r)}_i)\sum_j w_j\,\partial_i p\big(\mathbf u^{(r)}(t_j)\big),

  whose sum equals :math:`p(\mathbf x) - \overline{p(\mathbf b)}` of the same draw up to the path quadrature error
  (reported as ``completeness_gap``).

The result gives mean, std, median and the equal-tailed credible interval at ``level`` (quantiles
:math:`(1 \mp \text{level})/2` of the draws), all per point and feature, plus the draws themselves. Every
quantity is a Monte Carlo estimate with ``num_samples`` draws; ``standard_error`` is the standard error of the mean.

Supported models and likelihoods are those of :mod:`~gpytorch_explain.attribution.classification`. Each point is
drawn separately (the intervals are per point); the cost per point is an eigendecomposition of size
:math:`N(1+D)` per latent (:math:`N = 1` for the gradient, ``path_order * k + 1 + k`` for IG over ``k``
baselines).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gpytorch.likelihoods import BernoulliLikelihood, SoftmaxLikelihood
from gpytorch.models import ApproximateGP
from linear_operator import to_dense
from torch import Tensor

from ._probability_links import _kind, _link, _resolve_link
from ._quadrature import gauss_legendre
from .classification import _baselines
from .derived import DerivedCovariance
from .functionals import GradientFunctional
from .variational import VariationalConditioning, _check_points, variational_conditioning

__all__ = [
    "ProbabilityAttributionDistribution",
    "probability_gradient_distribution",
    "probability_ig_distribution",
]

#: default number of joint draws
DEFAULT_NUM_SAMPLES = 4000


@dataclass(frozen=True)
class ProbabilityAttributionDistribution:
    r"""Draws of a class-probability attribution and their summaries.

    Shapes (``S`` draws, ``m`` points, ``D`` features, ``C`` classes): ``samples`` ``(S, m, D)`` binary /
    ``(S, m, C, D)`` softmax; the summaries drop the leading ``S``.

    :param samples: The draws of the attribution.
    :param probability_samples: Draws of the class probability at ``x`` (``(S, m)`` or ``(S, m, C)``), jointly with
        ``samples``.
    :param mean: Mean of the draws.
    :param std: Standard deviation of the draws.
    :param median: Median of the draws.
    :param lower: Lower end of the equal-tailed credible interval: the ``(1 - level)/2`` quantile.
    :param upper: Upper end of the equal-tailed credible interval: the ``(1 + level)/2`` quantile.
    :param level: The interval's probability.
    :param standard_error: Monte Carlo standard error of ``mean`` (``std / sqrt(S)``).
    :param kind: ``"gradient"`` or ``"ig"``.
    :param completeness_gap: IG only: per draw :math:`\sum_i \mathrm{IG}_i - (p(\mathbf x) - \overline{p(\mathbf b)})`
        (``(S, m)`` or ``(S, m, C)``), the path quadrature error of each draw.
    """

    samples: Tensor
    probability_samples: Tensor
    mean: Tensor
    std: Tensor
    median: Tensor
    lower: Tensor
    upper: Tensor
    level: float
    standard_error: Tensor
    kind: str
    completeness_gap: Tensor | None = None

    @property
    def num_samples(self) -> int:
        return self.samples.size(0)

    def quantile(self, q: float | Tensor) -> Tensor:
        """Quantile(s) ``q`` of the draws (``torch.quantile`` along the draws)."""
        q = torch.as_tensor(q, dtype=self.samples.dtype, device=self.samples.device)
        return torch.quantile(self.samples, q, dim=0)


# ----------------------------------------------------------------------------------------------- joint Gaussian
def _node_joint(cond: VariationalConditioning, nodes: Tensor) -> tuple[Tensor, Tensor]:
    r"""Mean ``(*b, N(1+D))`` and covariance of :math:`(f(\text{nodes}), \nabla f(\text{nodes}))` under :math:`q`,
    ordered ``[f_1..f_N, ∂_1 f_1, ..., ∂_D f_1, ..., ∂_D f_N]``."""
    N, D = nodes.shape
    f_mean, f_cov = cond.latent(nodes)  # (*b, N), (*b, N, N)
    post = cond.functional_posterior(GradientFunctional(), nodes)
    g_mean = post.mean  # (*b, N, D)
    g_cov = to_dense(post.lazy_covariance_matrix)  # (*b, ND, ND)
    derived = DerivedCovariance(cond.kernel, GradientFunctional())
    Z, L, M = cond.inducing_points, cond.cholesky, cond.middle
    rows = derived.cross(nodes, Z)  # (*b, N, D, u)
    prior_cross = derived.cross(nodes, nodes)  # (*b, N, D, N): Cov_prior(∂_i f(n), f(n'))
    batch = torch.broadcast_shapes(
        rows.shape[:-3], prior_cross.shape[:-3], L.shape[:-2], M.shape[:-2], f_mean.shape[:-1]
    )
    u = L.size(-1)
    L = L.expand(*batch, u, u)
    Vg = torch.linalg.solve_triangular(L, rows.expand(*batch, N, D, u).reshape(*batch, N * D, u).mT, upper=False)
    Vf = torch.linalg.solve_triangular(L, to_dense(cond.kernel(Z, nodes)).expand(*batch, u, N), upper=False)
    cross = prior_cross.expand(*batch, N, D, N).reshape(*batch, N * D, N) - Vg.mT @ M.expand(*batch, u, u) @ Vf
    f_cov, g_cov = f_cov.expand(*batch, N, N), g_cov.expand(*batch, N * D, N * D)
    top = torch.cat([f_cov, cross.mT], dim=-1)
    bottom = torch.cat([cross, g_cov], dim=-1)
    cov = torch.cat([top, bottom], dim=-2)
    mean = torch.cat([f_mean.expand(*batch, N), g_mean.expand(*batch, N, D).reshape(*batch, N * D)], dim=-1)
    return mean, 0.5 * (cov + cov.mT)


def _draw(mean: Tensor, cov: Tensor, num: int, generator: torch.Generator | None) -> Tensor:
    """``num`` draws ``(num, *batch, n)`` of N(mean, cov) with a symmetric square root (cov may be singular)."""
    evals, evecs = torch.linalg.eigh(cov)
    scale = evals.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(cov.dtype).tiny)
    if (evals < -1e-6 * scale).any():
        raise ValueError(
            f"The joint covariance of (f, ∇f) has a clearly negative eigenvalue ({evals.min().item():.3g} against a "
            f"largest of {scale.max().item():.3g}); the variational posterior is not positive semi-definite."
        )
    root = evecs * evals.clamp_min(0).sqrt().unsqueeze(-2)
    eps = torch.randn(num, *mean.shape, generator=generator, dtype=mean.dtype).to(mean.device)
    return mean + (root @ eps.unsqueeze(-1)).squeeze(-1)


def _probability_gradients(kind: str, link: str | None, f: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    r"""Per draw and node: the probability ``(S, N)`` / ``(S, N, C)`` and its gradient ``(S, N, D)`` /
    ``(S, N, C, D)`` from the latent ``f`` ``(S, L, N)`` and its gradient ``g`` ``(S, L, N, D)``."""
    if kind == "bernoulli":
        f, g = f[:, 0], g[:, 0]
        p, dp = _link(link, f, 1)
        return p, dp.unsqueeze(-1) * g
    p = torch.softmax(f.movedim(1, -1), dim=-1)  # (S, N, C)
    g = g.movedim(1, -2)  # (S, N, C, D)
    pg = (p.unsqueeze(-1) * g).sum(-2, keepdim=True)
    return p, p.unsqueeze(-1) * (g - pg)


def _summarise(samples: Tensor, probs: Tensor, level: float, kind: str, gap: Tensor | None):
    lo, hi = (1.0 - level) / 2.0, (1.0 + level) / 2.0
    q = torch.quantile(samples, torch.tensor([lo, 0.5, hi], dtype=samples.dtype, device=samples.device), dim=0)
    std = samples.std(0)
    return ProbabilityAttributionDistribution(
        samples=samples, probability_samples=probs, mean=samples.mean(0), std=std, median=q[1], lower=q[0],
        upper=q[2], level=float(level), standard_error=std / samples.size(0) ** 0.5, kind=kind, completeness_gap=gap,
    )  # fmt: skip


def _setup(model, likelihood, x, link, level, num_samples):
    kind = _kind(model, likelihood)
    link = _resolve_link(likelihood, link) if kind == "bernoulli" else None
    if kind == "softmax" and link is not None:
        raise ValueError("link applies to BernoulliLikelihood only.")
    if isinstance(level, bool) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be a probability in (0, 1), got {level!r}.")
    if isinstance(num_samples, bool) or int(num_samples) < 2:
        raise ValueError(f"num_samples must be an int >= 2, got {num_samples!r}.")
    cond = variational_conditioning(model)
    x = _check_points(x, cond.inducing_points)
    if x.dim() != 2 or x.size(0) == 0:
        raise ValueError(f"x must be (m, D) with m >= 1, got shape {tuple(x.shape)}.")
    batch = cond.inducing_points.shape[:-2] if kind == "softmax" else ()
    if kind == "softmax" and tuple(batch) != (likelihood.num_classes,):
        raise NotImplementedError(f"The latent batch shape {tuple(batch)} is not ({likelihood.num_classes},).")
    return kind, link, cond, x


def _sample_nodes(cond, kind, nodes, num, generator):
    """Joint draws at the nodes: f ``(S, L, N)``, gradients ``(S, L, N, D)`` (``L = 1`` binary, ``C`` softmax)."""
    N, D = nodes.shape
    mean, cov = _node_joint(cond, nodes)
    if kind == "bernoulli":
        if mean.dim() != 1:
            raise NotImplementedError(f"Batched models (latent batch {tuple(mean.shape[:-1])}) are not supported.")
        mean, cov = mean.unsqueeze(0), cov.unsqueeze(0)
    draws = _draw(mean, cov, num, generator)  # (S, L, N(1+D))
    return draws[..., :N], draws[..., N:].reshape(*draws.shape[:-1], N, D)


def probability_gradient_distribution(
    model: ApproximateGP,
    likelihood: BernoulliLikelihood | SoftmaxLikelihood,
    x: Tensor,
    *,
    level: float = 0.9,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    link: str | None = None,
    generator: torch.Generator | None = None,
) -> ProbabilityAttributionDistribution:
    r"""The distribution of :math:`\nabla_{\mathbf x} p(y \mid \mathbf x)` under :math:`q`, with credible intervals.

    :param model: A variational GP classifier in eval mode (as for
        :func:`~gpytorch_explain.attribution.classification.expected_probability_gradient`).
    :param likelihood: ``BernoulliLikelihood`` (probability of :math:`y = 1`) or ``SoftmaxLikelihood``.
    :param x: Points ``(m, D)``.
    :param level: Probability of the equal-tailed credible interval (default 0.9: the 5% and 95% quantiles).
    :param num_samples: Joint draws of :math:`(f, \nabla f)` per point.
    :param link: Bernoulli only, as in ``expected_probability_gradient``.
    :param generator: Random generator of the draws.
    :return: :class:`ProbabilityAttributionDistribution` with ``samples`` ``(S, m, D)`` or ``(S, m, C, D)``.

    Example:
        >>> import torch, gpytorch
        >>> class SVGP(gpytorch.models.ApproximateGP):
        ...     def __init__(self, Z):
        ...         dist = gpytorch.variational.CholeskyVariationalDistribution(Z.size(0))
        ...         super().__init__(gpytorch.variational.VariationalStrategy(self, Z, dist))
        ...         self.covar_module = gpytorch.kernels.RBFKernel()
        ...     def forward(self, x):
        ...         return gpytorch.distributions.MultivariateNormal(torch.zeros_like(x[:, 0]), self.covar_module(x))
        >>> model = SVGP(torch.rand(8, 2, dtype=torch.float64)).double().eval()
        >>> x = torch.rand(3, 2, dtype=torch.float64)
        >>> lik = gpytorch.likelihoods.BernoulliLikelihood()
        >>> res = probability_gradient_distribution(model, lik, x, num_samples=500)
        >>> res.mean.shape, res.lower.shape, bool((res.lower <= res.upper).all())
        (torch.Size([3, 2]), torch.Size([3, 2]), True)
    """
    with torch.no_grad():
        kind, link, cond, x = _setup(model, likelihood, x, link, level, num_samples)
        out, probs = [], []
        for p in range(x.size(0)):
            f, g = _sample_nodes(cond, kind, x[p : p + 1], int(num_samples), generator)
            prob, grad = _probability_gradients(kind, link, f, g)  # (S, 1, ...)
            out.append(grad[:, 0])
            probs.append(prob[:, 0])
        return _summarise(torch.stack(out, 1), torch.stack(probs, 1), float(level), "gradient", None)


def probability_ig_distribution(
    model: ApproximateGP,
    likelihood: BernoulliLikelihood | SoftmaxLikelihood,
    x: Tensor,
    baseline: Tensor | None = None,
    *,
    level: float = 0.9,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    path_order: int = 32,
    link: str | None = None,
    generator: torch.Generator | None = None,
) -> ProbabilityAttributionDistribution:
    r"""The distribution of the integrated gradients of :math:`p(y \mid \mathbf x)` under :math:`q`, with credible
    intervals (joint draws of the latent and its gradient along the whole path; see the module docstring).

    :param baseline: ``None`` (the mean of the inducing points), ``(D,)`` or ``(k, D)`` (IG averaged over the
        baselines, per draw).
    :param path_order: Gauss–Legendre nodes along each path; ``completeness_gap`` shows the resulting error per
        draw (raise the order if it is not small against the attributions).
    :return: :class:`ProbabilityAttributionDistribution` (other parameters as in
        :func:`probability_gradient_distribution`).
    """
    with torch.no_grad():
        kind, link, cond, x = _setup(model, likelihood, x, link, level, num_samples)
        if isinstance(path_order, bool) or int(path_order) < 1:
            raise ValueError(f"path_order must be a positive int, got {path_order!r}.")
        b = _baselines(baseline, cond, x)
        k, D = b.size(0), x.size(1)
        t, w = gauss_legendre(int(path_order), x)
        J = t.numel()
        out, probs, gaps = [], [], []
        for p in range(x.size(0)):
            delta = x[p] - b  # (k, D)
            path = (b[:, None, :] + t[None, :, None] * delta[:, None, :]).reshape(-1, D)  # (kJ, D)
            nodes = torch.cat([path, x[p : p + 1], b])  # kJ path nodes, then x, then the k baselines
            f, g = _sample_nodes(cond, kind, nodes, int(num_samples), generator)
            prob, grad = _probability_gradients(kind, link, f, g)  # (S, N, ...), (S, N, ..., D)
            weights = (w[None, :, None] * delta[:, None, :] / k).reshape(k * J, D)  # (kJ, D)
            if kind == "softmax":
                weights = weights.unsqueeze(-2)
            ig = (grad[:, : k * J] * weights).sum(1)  # (S, D) or (S, C, D)
            p_x, p_b = prob[:, k * J], prob[:, k * J + 1 :].mean(1)
            out.append(ig)
            probs.append(p_x)
            gaps.append(ig.sum(-1) - (p_x - p_b))
        return _summarise(torch.stack(out, 1), torch.stack(probs, 1), float(level), "ig", torch.stack(gaps, 1))
