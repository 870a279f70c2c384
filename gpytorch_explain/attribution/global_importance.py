#!/usr/bin/env python3
r"""Global feature importance with uncertainty: the mean absolute attribution over a dataset, under the posterior.

For attributions :math:`a_{pi}` (gradient or integrated gradients of feature :math:`i` at point
:math:`\mathbf x_p`, :math:`p = 1..m`), the global importance of feature :math:`i` is

.. math:: G_i = \frac1m\sum_{p=1}^m |a_{pi}|.

Under the attribution GP, :math:`\mathbf a` is jointly Gaussian over all points and features (the
``MultitaskMultivariateNormal`` of :class:`~gpytorch_explain.attribution.PosteriorGradient` /
:class:`~gpytorch_explain.attribution.PosteriorIntegratedGradients`), so :math:`G_i` has a posterior distribution.
Its mean is exact by linearity and the folded normal,

.. math:: \mathbb E|a| = \sigma\sqrt{2/\pi}\,e^{-\mu^2/2\sigma^2} + \mu\,\bigl(1 - 2\Phi(-\mu/\sigma)\bigr),

but its spread depends on the correlations between points (nearby points share their uncertainty), so it is
computed from joint draws of :math:`\mathbf a` over all points: each draw gives one :math:`\mathbf G`, and the
result reports the mean, std, median and an equal-tailed credible interval of the draws, per feature. The
plug-in :math:`\frac1m\sum_p|\mathbb E a_{pi}|` (``plug_in``) is biased low when attributions are uncertain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from gpytorch.distributions import MultitaskMultivariateNormal
from torch import Tensor

__all__ = ["GlobalImportance", "global_importance"]

#: default number of joint draws
DEFAULT_NUM_SAMPLES = 2000
#: largest joint dimension (points x features x batch) sampled densely
MAX_JOINT_DIM = 20_000


@dataclass(frozen=True)
class GlobalImportance:
    r"""Posterior of the mean absolute attribution per feature (shapes ``(*batch, D)``; ``samples`` ``(S, *batch, D)``).

    :param samples: Draws of :math:`\mathbf G`.
    :param mean: Mean of the draws.
    :param std: Standard deviation of the draws.
    :param median: Median of the draws.
    :param lower: The ``(1 - level)/2`` quantile of the draws.
    :param upper: The ``(1 + level)/2`` quantile of the draws.
    :param level: The credible interval's probability.
    :param expected: :math:`\mathbb E[G_i]` exactly (folded normal, no sampling).
    :param plug_in: :math:`\frac1m\sum_p|\mathbb E a_{pi}|`, the importance of the posterior-mean attributions.
    :param kind: ``"gradient"``, ``"ig"`` or ``"given"`` (an attribution distribution was passed).
    :param feature_names: Optional names of the ``D`` features.
    """

    samples: Tensor
    mean: Tensor
    std: Tensor
    median: Tensor
    lower: Tensor
    upper: Tensor
    level: float
    expected: Tensor
    plug_in: Tensor
    kind: str
    feature_names: list[str] | None = None

    @property
    def num_samples(self) -> int:
        return self.samples.size(0)

    def ranking_probability(self) -> Tensor:
        r"""``P[r, i]``: the posterior probability that feature ``i`` has rank ``r`` (0 = most important),
        ``(*batch, D, D)``, from the draws."""
        ranks = torch.argsort(torch.argsort(self.samples, dim=-1, descending=True), dim=-1)  # rank of each feature
        D = self.samples.size(-1)
        onehot = torch.nn.functional.one_hot(ranks, D).to(self.samples.dtype)  # (S, *batch, D_feature, D_rank)
        return onehot.mean(0).transpose(-1, -2)

    def summary(self) -> str:
        """One line per feature, most important first: mean ± 1 std and the credible interval."""
        if self.mean.dim() != 1:
            raise ValueError("summary() is for unbatched results; index the batch first.")
        names = self.feature_names or [f"x{i}" for i in range(self.mean.numel())]
        width = max(len(n) for n in [*names, "feature"])
        pct = f"{100 * self.level:g}%"
        lines = [f"{'feature'.ljust(width)}  mean |attribution| ± 1 std (posterior)  {pct} credible interval"]
        for i in torch.argsort(self.mean, descending=True).tolist():
            lines.append(
                f"{names[i].ljust(width)}  {self.mean[i].item():.4g} ± {self.std[i].item():.2g}"
                f"  [{self.lower[i].item():.4g}, {self.upper[i].item():.4g}]"
            )
        return "\n".join(lines)


def _folded_mean(mu: Tensor, var: Tensor) -> Tensor:
    sd = var.clamp_min(0).sqrt()
    safe = torch.where(sd > 0, sd, torch.ones_like(sd))
    z = mu / safe
    folded = sd * math.sqrt(2 / math.pi) * torch.exp(-0.5 * z * z) + mu * (1 - 2 * torch.special.ndtr(-z))
    return torch.where(sd > 0, folded, mu.abs())


def _attribution(source, X, kind: str, baseline, order):
    """The joint attribution posterior: ``source`` itself, or computed from a model or an attribution object."""
    if isinstance(source, MultitaskMultivariateNormal):
        if X is not None:
            raise ValueError("Pass X only with a model; an attribution distribution already holds its points.")
        return source, "given"
    if X is None:
        raise ValueError("global_importance(model, X, ...) needs the dataset X (m, D).")
    from .posterior import PosteriorGradient, PosteriorIntegratedGradients

    if isinstance(source, (PosteriorGradient, PosteriorIntegratedGradients)):
        return source(X), "gradient" if isinstance(source, PosteriorGradient) else "ig"
    if kind == "gradient":
        if baseline is not None:
            raise ValueError("baseline applies to kind='ig' only.")
        kwargs = {} if order is None else {"order": order}
        return PosteriorGradient(source, **kwargs)(X), kind
    if kind == "ig":
        kwargs = {} if order is None else {"order": order}
        return PosteriorIntegratedGradients(source, baseline=baseline, **kwargs)(X), kind
    raise ValueError(f"kind must be 'ig' or 'gradient', got {kind!r}.")


def global_importance(
    source,
    X: Tensor | None = None,
    kind: str = "ig",
    *,
    baseline: Tensor | None = None,
    level: float = 0.9,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    generator: torch.Generator | None = None,
    order: int | None = None,
    feature_names: list[str] | None = None,
) -> GlobalImportance:
    r"""Mean absolute attribution per feature over a dataset, with its posterior uncertainty, in one call.

    :param source: A trained GPyTorch model (anything :class:`~gpytorch_explain.attribution.PosteriorGradient` and
        :class:`~gpytorch_explain.attribution.PosteriorIntegratedGradients` accept), one of those attribution objects,
        or an attribution distribution already computed at the dataset (a ``MultitaskMultivariateNormal`` with mean
        ``(*batch, m, D)``, e.g. ``PosteriorIntegratedGradients(model)(X)``).
    :param X: The dataset ``(m, D)`` (not with a distribution).
    :param kind: ``"ig"`` (default) or ``"gradient"``, when ``source`` is a model.
    :param baseline: IG baseline(s), as for ``PosteriorIntegratedGradients`` (default: the training-input mean).
    :param level: Probability of the equal-tailed credible interval (default 0.9).
    :param num_samples: Joint draws of all attributions.
    :param generator: Random generator of the draws.
    :param order: Quadrature order passed to the attribution classes (default: theirs).
    :param feature_names: Optional names for :meth:`GlobalImportance.summary`.
    :return: :class:`GlobalImportance`.
    :raises ValueError: bad arguments, or a joint dimension ``m * D`` above ``MAX_JOINT_DIM`` (20 000; use a
        subsample of X).

    Example:
        >>> import torch, gpytorch
        >>> class GP(gpytorch.models.ExactGP):
        ...     def __init__(self, x, y):
        ...         super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        ...         self.mean_module = gpytorch.means.ConstantMean()
        ...         self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=2))
        ...     def forward(self, x):
        ...         return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))
        >>> x = torch.rand(20, 2, dtype=torch.float64)
        >>> model = GP(x, torch.sin(3 * x[:, 0])).double().eval()
        >>> imp = global_importance(model, x[:8], kind="gradient", num_samples=500)
        >>> imp.mean.shape, bool((imp.lower <= imp.upper).all())
        (torch.Size([2]), True)
    """
    if isinstance(level, bool) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be a probability in (0, 1), got {level!r}.")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 2:
        raise ValueError(f"num_samples must be an int >= 2, got {num_samples!r}.")
    with torch.no_grad():
        attr, kind = _attribution(source, X, kind, baseline, order)
        mean = attr.mean  # (*batch, m, D)
        if mean.dim() < 2 or mean.size(-2) == 0:
            raise ValueError(f"The attributions must have shape (*batch, m, D) with m >= 1, got {tuple(mean.shape)}.")
        *batch, m, D = mean.shape
        if m * D * max(1, math.prod(batch)) > MAX_JOINT_DIM:
            raise ValueError(
                f"The joint attribution posterior has dimension {m * D} per batch (m = {m} points x D = {D}); "
                f"global_importance samples it densely up to {MAX_JOINT_DIM}: pass a subsample of X."
            )
        if feature_names is not None and len(feature_names) != D:
            raise ValueError(f"feature_names has {len(feature_names)} names but there are D = {D} features.")
        cov = attr.covariance_matrix  # (*batch, mD, mD), interleaved (point * D + feature)
        if not getattr(attr, "_interleaved", True):
            raise ValueError("Pass an interleaved attribution distribution (as the attribution classes return).")
        cov = 0.5 * (cov + cov.mT)
        evals, evecs = torch.linalg.eigh(cov)
        scale = evals.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(cov.dtype).tiny)
        if (evals < -1e-6 * scale).any():
            raise ValueError(
                f"The attribution covariance has a clearly negative eigenvalue ({evals.min().item():.3g}, largest "
                f"{scale.max().item():.3g}); it is not a valid joint posterior."
            )
        root = evecs * evals.clamp_min(0).sqrt().unsqueeze(-2)
        eps = torch.randn(num_samples, *batch, m * D, 1, generator=generator, dtype=mean.dtype).to(mean.device)
        draws = mean.reshape(*batch, m * D) + (root @ eps).squeeze(-1)  # (S, *batch, mD)
        samples = draws.reshape(num_samples, *batch, m, D).abs().mean(-2)  # (S, *batch, D)
        lo, hi = (1.0 - level) / 2.0, (1.0 + level) / 2.0
        q = torch.quantile(samples, torch.tensor([lo, 0.5, hi], dtype=samples.dtype, device=samples.device), dim=0)
        variance = attr.variance  # (*batch, m, D)
        return GlobalImportance(
            samples=samples, mean=samples.mean(0), std=samples.std(0), median=q[1], lower=q[0], upper=q[2],
            level=float(level), expected=_folded_mean(mean, variance).mean(-2), plug_in=mean.abs().mean(-2),
            kind=kind, feature_names=None if feature_names is None else [str(n) for n in feature_names],
        )  # fmt: skip
