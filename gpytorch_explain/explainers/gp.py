#!/usr/bin/env python3
r"""Adapters for GP explainers of this package: GPX, integrated gradients, gradient×input, ARD, KL."""

from __future__ import annotations

import torch
from gpytorch.kernels import Kernel, ScaleKernel
from torch import Tensor

from ..attribution import PosteriorGradient, PosteriorIntegratedGradients
from ..attribution.kl_relevance import kl_relevance
from .base import Explainer, ExplainerOutput

__all__ = ["ARDExplainer", "GPXExplainer", "GradientInputExplainer", "IGExplainer", "KLExplainer"]


class GPXExplainer(Explainer):
    r"""GPX (Yoshikawa & Iwata): contributions :math:`\mathbb E[\mathbf w_*]\odot\mathbf z_*` with their posterior
    std :math:`|\mathbf z_*|\odot\operatorname{std}(\mathbf w_*)`, weights :math:`\mathbb E[\mathbf w_*]`.
    Contributions add up to the latent prediction (baseline prediction 0).

    Example:
        >>> import torch
        >>> from gpytorch_explain import GPXModel
        >>> x = torch.randn(20, 2, dtype=torch.float64)
        >>> out = GPXExplainer(GPXModel(x, x[:, 0]).fit(max_iter=5)).explain(x[:3])
        >>> out.contributions.shape, out.std.shape
        ((3, 2), (3, 2))
    """

    name = "GPX"

    def __init__(self, model):
        self.model = model

    def explain(self, x: Tensor, z: Tensor | None = None) -> ExplainerOutput:
        expl = self.model.explain(x, z)
        return ExplainerOutput(expl.contributions_mean, expl.contributions_std, expl.weights_mean)


class IGExplainer(Explainer):
    r"""Integrated gradients of a GP posterior, exactly (:class:`~gpytorch_explain.PosteriorIntegratedGradients`):
    contributions :math:`\mathbb E[\mathrm{IG}(\mathbf x)]` with their posterior std; weights
    :math:`\mathbb E[\mathrm{IG}_j]/(x_j - b_j)`, the path-averaged gradient (0 where :math:`x_j = b_j`).
    Contributions add up to :math:`f(\mathbf x) - \bar f(\mathbf b)`.
    """

    name = "IG"

    def __init__(self, model, baseline: Tensor | None = None):
        self.model = model
        self.ig = PosteriorIntegratedGradients(model, baseline)

    def explain(self, x: Tensor) -> ExplainerOutput:
        post = self.ig(x)
        mean = post.mean
        diff = x - self.ig.baselines.mean(0)
        weights = torch.where(diff != 0, mean / torch.where(diff != 0, diff, 1), torch.zeros_like(mean))
        return ExplainerOutput(mean, post.variance.clamp_min(0).sqrt(), weights)


class GradientInputExplainer(Explainer):
    r"""Gradient × input: contributions :math:`\mathbb E[\nabla f(\mathbf x)]\odot(\mathbf x - \mathbf b)` with
    std :math:`|\mathbf x - \mathbf b|\odot\operatorname{std}(\nabla f(\mathbf x))`
    (:class:`~gpytorch_explain.PosteriorGradient`); weights :math:`\mathbb E[\nabla f(\mathbf x)]`.
    ``baseline`` defaults to 0 (plain gradient × input); with standardised inputs 0 is the training mean.
    Not additive in general.
    """

    name = "Grad×Input"
    additive = False

    def __init__(self, model, baseline: Tensor | None = None):
        self.model = model
        self.gradient = PosteriorGradient(model)
        self.baseline = baseline

    def explain(self, x: Tensor) -> ExplainerOutput:
        post = self.gradient(x)
        diff = x if self.baseline is None else x - self.baseline
        return ExplainerOutput(post.mean * diff, post.variance.clamp_min(0).sqrt() * diff.abs(), post.mean)


def _ard_lengthscale(kernel: Kernel) -> Tensor:
    while isinstance(kernel, ScaleKernel):
        kernel = kernel.base_kernel
    ls = getattr(kernel, "lengthscale", None)
    if ls is None or ls.numel() <= 1:
        raise TypeError(
            f"ARDExplainer needs a kernel with one lengthscale per feature (ard_num_dims=D), got "
            f"{type(kernel).__name__} with lengthscale shape {None if ls is None else tuple(ls.shape)}."
        )
    return ls.detach().reshape(-1)


def _relevance_output(rel: Tensor, x: Tensor, baseline: Tensor | None) -> ExplainerOutput:
    """Relevance as weights, contributions = relevance ⊙ (x - baseline) (the GPX paper's weights ⊙ z)."""
    diff = x if baseline is None else x - torch.as_tensor(baseline, dtype=x.dtype, device=x.device)
    return ExplainerOutput(rel * diff, None, rel)


class ARDExplainer(Explainer):
    r"""ARD relevance: :math:`r_j = 1/\ell_j` of the model's ARD kernel (``ScaleKernel`` wrappers are looked
    through), the same for every sample. As in the GPX paper, which treats relevances as the weights of a
    local linear explanation, ``weights`` are :math:`r` (global, so the stability score is 0) and
    ``contributions`` are :math:`r_j (x_j - b_j)` with ``baseline`` :math:`\mathbf b` (default 0, the training
    mean for standardised inputs). Not additive.
    """

    name = "ARD"
    additive = False

    def __init__(self, model, baseline: Tensor | None = None):
        self.model = model
        self.baseline = baseline

    def explain(self, x: Tensor) -> ExplainerOutput:
        rel = 1.0 / _ard_lengthscale(self.model.covar_module)
        if rel.numel() != x.size(-1):
            raise ValueError(f"The kernel has {rel.numel()} lengthscales but x has {x.size(-1)} features.")
        return _relevance_output(rel.to(x).expand_as(x), x, self.baseline)


class KLExplainer(Explainer):
    r"""KL relevance (Paananen et al. 2019) of a GP at each point,
    ``gpytorch_explain.attribution.kl_relevance.kl_relevance`` with :math:`\Delta = 10^{-3}` (as in the
    GPX paper). ``weights`` are the (non-negative) relevances :math:`r_j(\mathbf x)`, ``contributions``
    :math:`r_j(\mathbf x)(x_j - b_j)` as for :class:`ARDExplainer`. Not additive.
    """

    name = "KL"
    additive = False

    def __init__(self, model, delta: float = 1e-3, observation_noise: bool = True, baseline: Tensor | None = None):
        self.model = model
        self.delta = delta
        self.observation_noise = observation_noise
        self.baseline = baseline

    def explain(self, x: Tensor) -> ExplainerOutput:
        rel = kl_relevance(self.model, x, delta=self.delta, observation_noise=self.observation_noise)
        return _relevance_output(rel, x, self.baseline)
