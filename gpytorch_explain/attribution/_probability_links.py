#!/usr/bin/env python3
r"""Links and likelihood-specific expectations of class-probability attributions: probit / logit (one-dimensional
Gauss–Hermite or closed forms) and softmax (Monte Carlo and Taylor), used by
:mod:`gpytorch_explain.attribution.classification` and :mod:`gpytorch_explain.attribution.probability_intervals`."""

from __future__ import annotations

import math

import numpy as np
import torch
from gpytorch.likelihoods import BernoulliLikelihood, Likelihood, SoftmaxLikelihood
from gpytorch.variational import IndependentMultitaskVariationalStrategy, LMCVariationalStrategy
from torch import Tensor

from .latent_gradient_moments import _SUPPORTED, LatentGradientMoments, _check_model

LINKS: tuple[str, ...] = ("probit", "logit")

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


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
            f"are correlated); {_SUPPORTED}. Latent attributions of LMC models: "
            "PosteriorGradient / PosteriorIntegratedGradients (per task) and "
            "gpytorch_explain.attribution.lmc.lmc_joint_functional_posterior."
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

    ``mom`` holds ``N × m`` nodes (``(N, m, C)`` / ``(N, m, C, D)``), ``node_weights`` is ``(N, m, D)``, ``xi``
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
