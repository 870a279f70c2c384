#!/usr/bin/env python3
r"""Attribution GPs of a trained GPyTorch model: posterior gradients and integrated gradients."""

from __future__ import annotations

import torch
from gpytorch.models import ApproximateGP, ExactGP
from torch import Tensor

from ._quadrature import MAX_ROW_ELEMENTS
from .attribution_distribution import AttributionDistribution
from .completeness_gaps import CompletenessGaps
from .fallback import fallback_completeness
from .functional_posterior import _FunctionalPosterior
from .functionals import GradientFunctional, IntegratedGradientFunctional
from .sgpr import (
    sgpr_conditioning,
)
from .variational import variational_conditioning

__all__ = [
    "AttributionDistribution",
    "PosteriorGradient",
    "PosteriorIntegratedGradients",
    "CompletenessGaps",
    "MAX_ROW_ELEMENTS",
]


class PosteriorGradient(_FunctionalPosterior):
    r"""The posterior of the gradient :math:`\nabla f(\mathbf x)` of a trained GPyTorch model.

    Exact GPs (``ExactGP`` with a Gaussian likelihood, including :class:`~gpytorch_explain.GPXModel`
    with :math:`\mathbf z = \mathbf x`) are conditioned on their training data; variational models
    (``ApproximateGP`` with a ``VariationalStrategy``, ``UnwhitenedVariationalStrategy`` or an
    independent multitask wrapper of one) use their :math:`q(\mathbf u)`:
    :math:`\mathbb E = \mathbf K_{\partial *, U}\mathbf K_{UU}^{-1}\mathbf m`,
    :math:`\operatorname{Cov} = \mathbf K_{\partial\partial} - \mathbf K_{\partial *,U}\mathbf K_{UU}^{-1}
    (\mathbf K_{UU} - \mathbf S)\mathbf K_{UU}^{-1}\mathbf K_{U,\partial *}` (whitened equivalents).
    SGPR models (an ``ExactGP`` whose ``covar_module`` is an ``InducingPointKernel``) use the same formulas with
    the optimal :math:`q(\mathbf u)` of their training data and the base kernel as the prior, computed once in
    :math:`O(nM^2)` and cached on the prediction strategy
    (:func:`~gpytorch_explain.attribution.sgpr_functional_posterior`). For large ``ExactGP``\ s the derived
    cross-covariances are formed in chunks of points (:class:`~gpytorch_explain.settings.max_block_elements`).

    Differentiation is linear, so under the GP posterior the gradient is a GP:

    .. math::

        \mathbb E[\partial_i f(\mathbf x)] = \partial_i m(\mathbf x) + \partial_i \mathbf k(\mathbf x, \mathbf X)^\top
        \boldsymbol\alpha, \qquad
        \operatorname{Cov}[\partial_i f(\mathbf x), \partial_j f(\mathbf x')] =
        \partial_i \partial'_j k(\mathbf x, \mathbf x') - \partial_i \mathbf k(\mathbf x, \mathbf X)^\top
        \mathbf C^{-1} \partial'_j \mathbf k(\mathbf X, \mathbf x'),

    with :math:`\boldsymbol\alpha = \mathbf C^{-1}(\mathbf y - \mathbf m)` and :math:`\mathbf C`
    the model's own cached solves (Cholesky, CG, or LOVE under ``fast_pred_var``).

    Calling it on ``x`` (``(m, D)``) returns a ``MultitaskMultivariateNormal`` for the latent
    :math:`f`'s gradient: mean ``(m, D)``, covariance the joint over points and features,
    interleaved (index ``point * D + feature``), lazy (``.variance`` needs only per-point blocks).

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain import PosteriorGradient
        >>> x = torch.linspace(0, 1, 20, dtype=torch.float64).unsqueeze(-1)
        >>> class GP(gpytorch.models.ExactGP):
        ...     def __init__(self, x, y):
        ...         super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        ...         self.mean_module = gpytorch.means.ZeroMean()
        ...         self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
        ...     def forward(self, x):
        ...         return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))
        >>> model = GP(x, torch.sin(6 * x[:, 0])).double().eval()
        >>> grad = PosteriorGradient(model)(x[:3])
        >>> grad.mean.shape, grad.variance.shape
        (torch.Size([3, 1]), torch.Size([3, 1]))
    """

    def __init__(self, model: ExactGP, order: int | None = None, method: str = "auto"):
        super().__init__(model, GradientFunctional(), order=order, method=method)


class PosteriorIntegratedGradients(_FunctionalPosterior):
    r"""The posterior of the integrated-gradient attributions of a trained GPyTorch model (exact or variational).

    .. math::

        \mathrm{IG}_i(\mathbf x) = (x_i - b_i)\int_0^1 \partial_i f(\mathbf b + t(\mathbf x - \mathbf b))\,dt

    is linear in :math:`f`, so under the posterior it is a GP (Seitz et al.), computed exactly:
    closed forms for RBF/ARD, linear and RFF kernels (and sums/scalings of them), autograd and
    Gauss–Legendre quadrature of order ``order`` for other differentiable kernels. With several
    baselines (``(k, D)``), the attribution is their average — expected integrated gradients —
    which is still a GP. Completeness holds in mean and in distribution:
    :math:`\sum_i \mathrm{IG}_i(\mathbf x) = f(\mathbf x) - \bar f(\mathbf b)` (see :meth:`completeness`).

    :param model: A trained ``ExactGP`` (eval mode) with a Gaussian likelihood (an SGPR model, with an
        ``InducingPointKernel`` as its ``covar_module``, included), a
        :class:`~gpytorch_explain.GPXModel` with :math:`\mathbf z = \mathbf x` (then the smooth part
        :math:`\mathbf g(\mathbf x)^\top(\mathbf c\odot\mathbf x)` of the latent is attributed, with
        :math:`\mathbf c` the feature scale of ``standardize_x``/``standardize_y``, in raw units like
        ``model(x)``; a constant mean or intercept has no attribution), or an ``ApproximateGP``
        (see :class:`PosteriorGradient`).
    :param baseline: ``None`` (the mean of the training inputs, or of the inducing points for a
        variational model), a ``(D,)`` tensor, or ``(k, D)`` baselines.
    :param order: Gauss–Legendre order for kernels without closed forms; ``None`` (default) is adaptive: orders
        32, 64, ... until two agree to ``QUADRATURE_RTOL`` (:math:`10^{-4}`) of each point's
        attribution scale (up to 1024, else a ``QuadratureWarning`` with the numbers). The order used is
        ``last_order`` and ``attr.quadrature_order``.
    :param method: ``"auto"`` (closed forms when verified, see below, else the autograd fallback), ``"closed_form"``
        (raise if not verified) or ``"autograd"``.

    **Closed forms or autograd.** The closed forms differentiate ``mean_module``/``covar_module`` of the raw
    inputs, so they are used only when :func:`~gpytorch_explain.attribution.detection.fallback_reason` verifies
    that the model's ``forward`` is exactly that (no feature extractor, no BoTorch input/outcome transform, a
    single-output kernel; compared at probe points). Otherwise (deep kernel learning, BoTorch ``SingleTaskGP`` with
    ``Normalize``/``Standardize``, ``MultitaskKernel`` models, user ``forward``\ s) the attribution GP comes from the
    model's own joint posterior by autograd (``gpytorch_explain.attribution.fallback``), in the units the user
    sees, with ``method == "autograd"`` on this object and on the result and an ``AutogradFallbackWarning`` once.
    Multi-output models give a batch of per-output attributions, mean ``(outputs, m, D)``.

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain import PosteriorIntegratedGradients
        >>> x = torch.rand(30, 2, dtype=torch.float64)
        >>> class GP(gpytorch.models.ExactGP):
        ...     def __init__(self, x, y):
        ...         super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        ...         self.mean_module = gpytorch.means.ConstantMean()
        ...         self.covar_module = gpytorch.kernels.RBFKernel(ard_num_dims=2)
        ...     def forward(self, x):
        ...         return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))
        >>> model = GP(x, x[:, 0] * x[:, 1]).double().eval()
        >>> ig = PosteriorIntegratedGradients(model)
        >>> attr = ig(x[:4])
        >>> gaps = ig.completeness(x[:4])
        >>> bool(gaps.mean_gap.abs().max() < 1e-10) and bool(gaps.variance_gap.abs().max() < 1e-10)
        True
    """

    def __init__(self, model: ExactGP, baseline: Tensor | None = None, order: int | None = None, method: str = "auto"):
        _FunctionalPosterior.__init__(self, model, GradientFunctional(), order=order, method=method)
        self.functional = IntegratedGradientFunctional(self._check_baseline(baseline))

    def _check_baseline(self, baseline) -> Tensor:
        X = self._raw_train_inputs()
        if X is None:
            if baseline is None:
                raise ValueError("The model's input transform cannot be inverted: pass the baseline explicitly.")
            X = baseline
        if self._dims is not None:
            X = self.model.covar_module.split_inputs(X)[0]
        D = X.size(-1)
        if baseline is None:
            if X.dim() > 2:
                flat = X.reshape(-1, *X.shape[-2:])
                if self.method == "closed_form" or not (flat == flat[:1]).all():
                    raise ValueError("For batch models pass the baseline explicitly ((D,) or (k, D)).")
                X = flat[0]  # batch-independent outputs on the same inputs (BoTorch multi-output)
            return X.detach().mean(0)
        if not torch.is_tensor(baseline):
            raise TypeError(f"baseline must be a torch.Tensor, got {type(baseline).__name__}.")
        if baseline.dim() not in (1, 2) or baseline.size(-1) != D:
            raise ValueError(f"baseline must have shape (D,) or (k, D) with D = {D}, got {tuple(baseline.shape)}.")
        if baseline.size(0) == 0:
            raise ValueError("baseline is empty.")
        if not baseline.is_floating_point() or baseline.dtype != X.dtype:
            raise TypeError(f"baseline must have the model's dtype {X.dtype}, got {baseline.dtype}.")
        if not torch.isfinite(baseline).all():
            raise ValueError("baseline contains NaN or infinite values.")
        return baseline.to(X.device)

    @property
    def baselines(self) -> Tensor:
        """The baselines, ``(k, D)``."""
        return self.functional.baselines

    # ------------------------------------------------------------------ completeness
    def _latent_value(self, points: Tensor, strategy, alpha, factor, factor_type, X):
        """Posterior mean and covariance of the attributed latent at ``points``."""
        k = self._kernel
        cross = k(points, X).to_dense()  # (*b, P, n)
        mean = (cross @ alpha.unsqueeze(-1)).squeeze(-1)
        if self._mean is not None:
            mean = mean + self._mean(points)
        prior = k(points, points).to_dense()
        if factor_type == "cholesky":
            v = torch.linalg.solve_triangular(factor, cross.mT, upper=False)
            red = v.mT @ v
        elif factor_type == "root":
            v = factor.mT @ cross.mT
            red = v.mT @ v
        else:
            red = cross @ factor.solve(cross.mT)
        return mean, prior - red

    def completeness(self, x: Tensor) -> CompletenessGaps:
        r"""Check completeness in mean and in distribution at ``x`` (``(m, D)``)."""
        x = self._check_x(x)
        attr = self(x)
        if self.method == "autograd" or self._affine is not None:
            return fallback_completeness(self, x, attr)
        blocks = attr.lazy_covariance_matrix.point_blocks()
        sum_mean = attr.mean.sum(-1)
        sum_var = blocks.sum((-1, -2))
        if isinstance(self.model, ApproximateGP):
            latent = variational_conditioning(self.model).latent
        elif self._sgpr:
            latent = sgpr_conditioning(self.model).latent
        else:
            strategy = self._strategy()
            X = self._train_inputs()
            if self._dims is not None:
                X = self.model.covar_module.split_inputs(X)[0]
            alpha = self._alpha(strategy)
            factor, factor_type = self._factor(strategy)

            def latent(points: Tensor) -> tuple[Tensor, Tensor]:
                return self._latent_value(points, strategy, alpha, factor, factor_type, X)

        b = self.baselines
        kb = b.size(0)
        mean_out, var_out = [], []
        for p in range(x.size(-2)):
            pts = torch.cat([x[..., p : p + 1, :], b.expand(*x.shape[:-2], kb, b.size(-1))], dim=-2)
            mean, cov = latent(pts)
            w = torch.cat([torch.ones(1, dtype=x.dtype, device=x.device), torch.full((kb,), -1.0 / kb).to(x)])
            mean_out.append((mean * w).sum(-1))
            var_out.append(((cov * w.unsqueeze(-1)) * w).sum((-1, -2)))
        diff_mean = torch.stack(mean_out, dim=-1)
        diff_var = torch.stack(var_out, dim=-1)
        return CompletenessGaps(
            mean_gap=sum_mean - diff_mean,
            variance_gap=sum_var - diff_var,
            attribution_sum_mean=sum_mean,
            prediction_difference_mean=diff_mean,
            attribution_sum_variance=sum_var,
            prediction_difference_variance=diff_var,
        )


def __getattr__(name: str):
    from .._deprecation import resolve_deprecated

    return resolve_deprecated(__name__, name, ("IntegratedGradients",), globals().__getitem__)
