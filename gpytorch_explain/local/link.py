#!/usr/bin/env python3
r"""The surrogate's output scale: :class:`~gpytorch_explain.local.LocalGPExplainer`'s ``link`` option.

With ``link="logit"`` the black box returns probabilities :math:`p(\mathbf x) \in [0, 1]` (a classifier's
``predict_proba[:, k]``) and the surrogates model :math:`g = \operatorname{logit} p = \log p - \log(1 - p)`, where a
smooth classifier is smooth and unsaturated: near :math:`p \approx 0` or 1 the probability is flat to many digits
while the logit still moves, so a surrogate of :math:`p` cannot resolve the slope at ``x`` (the finite differences of
the stencil are ~1e-6 there) and one of :math:`g` can. Everything the user reads stays on the probability scale:

* **gradient**, exactly: :math:`\partial p/\partial x_i = p(\mathbf x)(1 - p(\mathbf x))\,\partial g/\partial x_i`,
  and :math:`p(\mathbf x)` is observed (the first black-box row), so the Gaussian posterior of
  :math:`\nabla g(\mathbf x)` maps to a Gaussian posterior of :math:`\nabla p(\mathbf x)` by one scalar factor;
* **integrated gradients** of :math:`p = \sigma(g)` along :math:`\mathbf u(t) = \mathbf b + t(\mathbf x - \mathbf b)`,
  :math:`\mathrm{IG}_i = \Delta_i\int_0^1 \sigma'(g(t))\,\partial_i g(t)\,dt` (:math:`\sigma` the logistic function),
  no longer Gaussian. Its mean is computed per Gauss–Legendre node from the joint Gaussian of :math:`g` and
  :math:`\partial_i g` at the node (Stein's lemma, as in :mod:`gpytorch_explain.attribution.classification`):
  :math:`\mathbb E[\sigma'(g)\partial_i g] = \mu_i\,\mathbb E[\sigma'(g)] + c_i\,\mathbb E[\sigma''(g)]`,
  :math:`c_i = \operatorname{Cov}(\partial_i g, g)`, the one-dimensional expectations by Gauss–Hermite. Its std is
  a Monte Carlo estimate over joint draws of :math:`(g, \nabla g)` at all the nodes (relative error about
  :math:`1/\sqrt{2S}` for :math:`S` draws). The means sum to
  :math:`\mathbb E[\sigma(g(\mathbf x))] - \mathbb E[\sigma(g(\mathbf b))]` up to the quadrature error, which is
  checked and reported when it exceeds :data:`IG_COMPLETENESS_TOL`;
* **predict**: :math:`\mathbb E[\sigma(g)]` and :math:`\operatorname{sd}[\sigma(g)]` under the Gaussian posterior of
  :math:`g`, by Gauss–Hermite.

``relevance`` (:math:`1/\ell`) and ``fidelity`` (leave-one-out :math:`R^2`) are those of the surrogate of
:math:`g`. Outputs of exactly 0 or 1 are clipped to :data:`LOGIT_CLIP` from the edge (and reported): the link is meant
for smooth classifiers (SVC, logistic regression, neural networks), not for a tree ensemble's vote fractions.

Example:
    >>> import numpy as np
    >>> from gpytorch_explain.local.link import to_link_scale
    >>> g, notes = to_link_scale("logit", np.array([0.5, 0.880797077977882]))
    >>> np.round(g, 6).tolist(), notes
    ([0.0, 2.0], [])
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from gpytorch.utils.warnings import NumericalWarning

from ..attribution import PosteriorGradient

__all__ = [
    "LINKS",
    "LOGIT_CLIP",
    "IG_COMPLETENESS_TOL",
    "SATURATION_HINT",
    "link_hint",
    "to_link_scale",
    "slope_factor",
]

LINKS = ("identity", "logit")
#: probabilities are clipped to [LOGIT_CLIP, 1 - LOGIT_CLIP] before the logit (|logit| <= 27.6)
LOGIT_CLIP = 1e-12
#: the probability-scale IG's completeness gap (relative to |E p(x) - E p(b)|, or absolute below 1e-6) that is reported
IG_COMPLETENESS_TOL = 1e-3
_GH_ORDER = 48
_DT = torch.float64


def check_link(link) -> str:
    if not isinstance(link, str) or link not in LINKS:
        raise ValueError(f"Unknown link {link!r}; choose one of {LINKS}.")
    return link


def to_link_scale(link: str, y: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The outputs on the surrogate's scale and the notes for ``result.warnings`` (clipped outputs)."""
    if link == "identity":
        return y, []
    bad = (y < 0) | (y > 1)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"link='logit' needs black-box outputs in [0, 1] (probabilities, e.g. predict_proba[:, k]); "
            f"{int(bad.sum())} of {y.size} outputs are outside, e.g. row {k}: {y[k]:.6g}. Use link='identity' for "
            "other outputs."
        )
    p = np.clip(y, LOGIT_CLIP, 1.0 - LOGIT_CLIP)
    notes = []
    edge = (y < LOGIT_CLIP) | (y > 1.0 - LOGIT_CLIP)
    if edge.any():
        notes.append(
            f"link: {int(edge.sum())} of {y.size} outputs are 0 or 1 to within {LOGIT_CLIP:g} and were clipped "
            f"(logit ±{np.log(1 / LOGIT_CLIP):.1f}); the logit link is meant for smooth probabilities "
            "(SVC, logistic regression, neural nets): a black box that returns exact 0s and 1s (a tree ensemble's "
            "votes) has steps of that height in the logit; use link='identity' there."
        )
    top = np.log(1.0 / LOGIT_CLIP)  # the logit of 1 - LOGIT_CLIP, to the bit on both sides
    g = np.log(p) - np.log1p(-p)
    return np.where(y < LOGIT_CLIP, -top, np.where(y > 1.0 - LOGIT_CLIP, top, g)), notes


#: with ``link="identity"``, a probability black box whose output at ``x`` is within this of 0 or 1 gets a hint
SATURATION_HINT = 0.05


def link_hint(link: str, y: np.ndarray, returns_probability: bool) -> list[str]:
    """A note for ``result.warnings`` when a probability black box (``from_sklearn_classifier``'s, which says so by
    its ``returns_probability`` attribute) is saturated at ``x`` and explained without the link."""
    if link != "identity" or not returns_probability or y.size == 0 or y.min() < 0 or y.max() > 1:
        return []
    p0 = float(y[0])
    if min(p0, 1.0 - p0) >= SATURATION_HINT:
        return []
    return [
        f"link: the probability at x is {p0:.6g}, within {SATURATION_HINT:g} of 0 or 1; link='logit' (with "
        "attribution_noise=1e-6) fits its logit, which does not saturate, and reports on the probability scale "
        "(on 12 random smooth classifiers the integrated gradients of p were inside two stds for 95 of 96 features "
        "with it and 59 of 96 without; benchmarks/local_link_calibration.py). Not for tree ensembles."
    ]


def slope_factor(link: str, y0: float) -> float:
    """``∂p/∂g`` at ``x`` (``y0`` the black box's output at ``x``): ``p(1 - p)`` for the logit link, 1 otherwise."""
    if link == "identity":
        return 1.0
    p = float(np.clip(y0, LOGIT_CLIP, 1.0 - LOGIT_CLIP))
    return p * (1.0 - p)


def _sigmoid_derivs(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    s = torch.sigmoid(g)
    d1 = s * (1 - s)
    return s, d1, d1 * (1 - 2 * s)


def _gauss_hermite(
    mean: torch.Tensor, var: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``E[σ], E[σ²], E[σ'], E[σ'']`` for ``g ~ N(mean, var)`` (elementwise), probabilists' Gauss–Hermite."""
    z, w = np.polynomial.hermite_e.hermegauss(_GH_ORDER)
    z = torch.as_tensor(z, dtype=mean.dtype)
    w = torch.as_tensor(w / w.sum(), dtype=mean.dtype)
    g = mean[..., None] + var.clamp_min(0).sqrt()[..., None] * z
    s, d1, d2 = _sigmoid_derivs(g)
    return (s * w).sum(-1), (s * s * w).sum(-1), (d1 * w).sum(-1), (d2 * w).sum(-1)


def probability_moments(mean_g: np.ndarray, std_g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of ``σ(g)`` for ``g ~ N(mean_g, std_g²)`` (Gauss–Hermite; the variance in two passes, so that a
    std of round-off size at a sampled point is not lost to cancellation)."""
    z, w = np.polynomial.hermite_e.hermegauss(_GH_ORDER)
    w = w / w.sum()
    m = np.asarray(mean_g, dtype=np.float64)[..., None]
    s = np.asarray(std_g, dtype=np.float64)[..., None]
    sig = 0.5 * (1.0 + np.tanh(0.5 * (m + s * z)))  # the logistic function, without overflow
    e1 = (sig * w).sum(-1)
    return e1, np.sqrt(((sig - e1[..., None]) ** 2 * w).sum(-1))


def _joint_path_posterior(model, T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean ``(K(1+d),)`` and covariance of ``[z(t_1..K), ∇z(t_1), ..., ∇z(t_K)]`` of the surrogate's latent ``z``."""
    K, d = T.shape
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Negative variance", category=NumericalWarning)
        grad = PosteriorGradient(model)(T)
        g_mean = grad.mean.reshape(K * d).detach()
        g_cov = grad.covariance_matrix.reshape(K * d, K * d).detach()  # interleaved: point-major, feature-minor
        A = T.clone().requires_grad_(True)
        post = model.posterior(torch.cat([T, A]))
        cov = post.mvn.covariance_matrix
        v_mean = post.mean[:K, 0].detach()
        v_cov = cov[:K, :K].detach()
        cross = torch.zeros(K, K * d, dtype=T.dtype)  # Cov(z(t_k), ∂_i z(t_l)) at column l d + i
        for k in range(K):
            (gk,) = torch.autograd.grad(cov[k, K:].sum(), A, retain_graph=k < K - 1)
            cross[k] = gk.reshape(K * d)
    mean = torch.cat([v_mean, g_mean])
    top = torch.cat([v_cov, cross], 1)
    bottom = torch.cat([cross.T, g_cov], 1)
    cov = torch.cat([top, bottom], 0)
    return mean, 0.5 * (cov + cov.T)


def probability_integrated_gradients(
    model,
    u_x: torch.Tensor,
    u_b: torch.Tensor,
    ym: float,
    ys: float,
    *,
    num_nodes: int = 24,
    num_samples: int = 4096,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, float]:
    r"""Mean and std of the integrated gradients of :math:`p = \sigma(g)`, :math:`g = y_m + y_s z`, from ``u_b``
    to ``u_x`` (box units, ``(d,)``), for the surrogate ``model`` of the standardised logit ``z``; and the relative
    completeness gap of the mean (see the module docstring)."""
    t, w = np.polynomial.legendre.leggauss(num_nodes)
    t = torch.as_tensor((t + 1) / 2, dtype=_DT)
    w = torch.as_tensor(w / 2, dtype=_DT)
    delta = u_x - u_b
    T = u_b + t[:, None] * delta
    K, d = T.shape
    mean, cov = _joint_path_posterior(model, T)
    mu_z, var_z = mean[:K], cov.diagonal()[:K]
    mu_grad = mean[K:].reshape(K, d)
    c = cov[:K, K:].reshape(K, K, d)[torch.arange(K), torch.arange(K)]  # Cov(z(t_k), ∂z(t_k))
    _, _, e_d1, e_d2 = _gauss_hermite(ym + ys * mu_z, ys**2 * var_z)
    # E[σ'(g) ∂_i g] with ∂g = ys ∂z, Cov(∂_i g, g) = ys² c
    node = e_d1[:, None] * ys * mu_grad + e_d2[:, None] * ys**2 * c
    ig_mean = delta * (w[:, None] * node).sum(0)
    # Monte Carlo std over joint draws
    evals, evecs = torch.linalg.eigh(cov)
    root = evecs * evals.clamp_min(0).sqrt()
    gen = torch.Generator().manual_seed(int(seed))
    draws = mean + torch.randn(num_samples, mean.numel(), dtype=_DT, generator=gen) @ root.T
    gz, gg = draws[:, :K], draws[:, K:].reshape(num_samples, K, d)
    _, d1, _ = _sigmoid_derivs(ym + ys * gz)
    ig_draws = delta * (w[None, :, None] * d1[..., None] * ys * gg).sum(1)
    ig_std = ig_draws.std(0)
    # completeness: sum_i E[IG_i] against E σ(g(x)) - E σ(g(b))
    ends = torch.stack([u_b, u_x])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Negative variance", category=NumericalWarning)
        post = model.posterior(ends)
        m_end, v_end = post.mean[:, 0], post.variance[:, 0]
    e_end = _gauss_hermite(ym + ys * m_end, ys**2 * v_end)[0]
    target = float(e_end[1] - e_end[0])
    gap = abs(float(ig_mean.sum()) - target) / max(abs(target), 1e-6)
    return ig_mean.detach().numpy(), ig_std.detach().numpy(), gap
