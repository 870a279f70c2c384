#!/usr/bin/env python3
r"""The surrogates' fitting objective as one dense torch function, for the small fits of the local explainer.

:class:`~gpytorch_explain.local.LocalGPExplainer` fits small exact GPs (tens to a few hundred samples) dozens of
times per explanation: the acquisition surrogate after each batch, the trend surrogate from two starts, the SAAS
relevance surrogate and its bootstrap refits. Each L-BFGS-B step evaluates the negative log marginal likelihood
plus log priors, per sample, and its gradient; through :class:`~gpytorch.mlls.ExactMarginalLogLikelihood` most of
an evaluation's cost at these sizes is per-call overhead (kernel dispatch, lazy operators, distribution objects),
not arithmetic. :func:`dense_loss_closure` computes the same objective,

.. math::

    \mathcal L(\theta) = -\frac1n\Big[-\tfrac12(\mathbf y - \mathbf m)^\top\mathbf C^{-1}(\mathbf y - \mathbf m)
    - \tfrac12\log|\mathbf C| - \tfrac n2\log 2\pi + \sum_{\text{priors}}\log p(\cdot)\Big],
    \qquad \mathbf C = \mathbf K_\theta + \sigma_n^2\mathbf I,

with :math:`\mathbf K_\theta` assembled densely for the kernels the surrogates use (ARD ``RBFKernel``,
``ScaleKernel``, ``LinearKernel`` and sums of them; any other kernel is evaluated through GPyTorch and
densified), the Cholesky factor from :func:`linear_operator.utils.cholesky.psd_safe_cholesky` (the jitter and
warnings of GPyTorch's own path, ``gpytorch.settings.cholesky_jitter`` honoured), and the priors read from the
model's ``named_priors()`` exactly as :class:`~gpytorch.mlls.ExactMarginalLogLikelihood` adds them. The
hyperparameters come from the modules' own properties (their constraints' transforms included), so the
parameters and bounds that L-BFGS-B sees are unchanged. Values agree with GPyTorch's to round-off
(``tests/local/test_local_dense_objective.py`` checks value and gradient against it and against a brute-force
dense computation in float64) at 1.7-3.7x less cost per evaluation
(``benchmarks/local_fit_speed.py``).

Example:
    >>> import torch
    >>> from botorch.models import SingleTaskGP
    >>> from gpytorch.mlls import ExactMarginalLogLikelihood
    >>> from gpytorch_explain.local.dense_objective import dense_loss_closure
    >>> X = torch.rand(20, 3, dtype=torch.float64)
    >>> model = SingleTaskGP(X, X.sum(-1, keepdim=True), outcome_transform=None)
    >>> mll = ExactMarginalLogLikelihood(model.likelihood, model)
    >>> params = {n: p for n, p in mll.named_parameters() if p.requires_grad}
    >>> loss, grads = dense_loss_closure(mll, params)()
    >>> _ = model.train()
    >>> reference = -mll(model(X), model.train_targets)
    >>> bool(torch.allclose(loss, reference))
    True
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
from botorch.optim.closures.core import ForwardBackwardClosure
from gpytorch import settings
from gpytorch.kernels import AdditiveKernel, Kernel, LinearKernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.means import ConstantMean, ZeroMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

__all__ = [
    "dense_fits",
    "dense_fits_enabled",
    "squared_differences",
    "dense_kernel_matrix",
    "DenseObjective",
    "dense_negative_objective",
    "dense_loss_closure",
    "supports_dense_objective",
]


_ENABLED = [True]


def dense_fits_enabled() -> bool:
    """Whether the explainer's surrogate fits use the dense objective where it applies (the default)."""
    return _ENABLED[0]


@contextlib.contextmanager
def dense_fits(enabled: bool = True) -> Iterator[None]:
    """Within the block, the explainer's surrogate fits use the dense objective (``True``, the default outside any
    block) or GPyTorch's ``ExactMarginalLogLikelihood`` (``False``: the fits before 2026-11-30, for comparisons such
    as ``benchmarks/local_fit_speed.py``). Not thread-safe (a module-level switch, as ``gpytorch.settings``)."""
    previous = _ENABLED[0]
    _ENABLED[0] = bool(enabled)
    try:
        yield
    finally:
        _ENABLED[0] = previous


def squared_differences(U: Tensor) -> Tensor:
    r"""The per-feature squared differences :math:`D_{ab,i} = (u_{a,i} - u_{b,i})^2` of ``U`` (``(n, d)``), as
    ``(n, n, d)``: computed once per fit, they make an ARD-RBF matrix one matrix-vector product,
    :math:`\mathbf K = \exp(-\tfrac12\mathbf D\,\boldsymbol\ell^{-2})`, with a cheap backward pass."""
    diff = U.unsqueeze(-2) - U.unsqueeze(-3)
    return diff * diff


KernelPlan = Callable[[Tensor, Tensor], Tensor]


def _kernel_plan(kernel: Kernel) -> KernelPlan:
    """A function ``(U, sqdiff) -> K`` for ``kernel``, its structure resolved once (GPyTorch's ``batch_shape`` and
    ``isinstance`` dispatch cost more than the arithmetic at these sizes)."""
    if kernel.active_dims is not None or kernel.batch_shape != torch.Size([]):
        return lambda U, D: kernel(U).to_dense()
    if isinstance(kernel, RBFKernel):
        return lambda U, D: torch.exp(D @ (-0.5 / kernel.lengthscale.reshape(-1, 1) ** 2)).squeeze(-1)
    if isinstance(kernel, ScaleKernel):
        base = _kernel_plan(kernel.base_kernel)
        return lambda U, D: kernel.outputscale.reshape(()) * base(U, D)
    if isinstance(kernel, LinearKernel):
        return lambda U, D: kernel.variance.reshape(()) * (U @ U.transpose(-1, -2))
    if isinstance(kernel, AdditiveKernel):
        parts = [_kernel_plan(k) for k in kernel.kernels]

        def additive(U: Tensor, D: Tensor) -> Tensor:
            out = parts[0](U, D)
            for part in parts[1:]:
                out = out + part(U, D)
            return out

        return additive
    return lambda U, D: kernel(U).to_dense()


def dense_kernel_matrix(kernel: Kernel, U: Tensor, sqdiff: Tensor | None = None) -> Tensor:
    r"""The dense training covariance :math:`\mathbf K = k(\mathbf U, \mathbf U)` of ``kernel`` at ``U`` (``(n, d)``).

    ARD or isotropic ``RBFKernel`` (:math:`\exp(-\tfrac12\sum_i (u_i - u'_i)^2/\ell_i^2)`, from the squared
    coordinate differences, so exactly 1 on the diagonal), ``ScaleKernel`` (times its outputscale),
    ``LinearKernel`` (:math:`v\,\mathbf u^\top\mathbf u'`) and ``AdditiveKernel`` are assembled directly; other
    kernels, or kernels with ``active_dims`` or a batch shape, go through GPyTorch (``kernel(U).to_dense()``).
    ``sqdiff`` is :func:`squared_differences` of ``U``, if the caller holds it.
    """
    return _kernel_plan(kernel)(U, squared_differences(U) if sqdiff is None else sqdiff)


def supports_dense_objective(mll: ExactMarginalLogLikelihood) -> bool:
    """Whether :func:`dense_negative_objective` computes ``mll``'s objective: an exact GP with a single output and no
    batch, one training input tensor, a constant or zero mean, a homoskedastic ``GaussianLikelihood``, no added loss
    terms and no input or outcome transform; any kernel (:func:`dense_kernel_matrix`). ``gpytorch.settings`` are
    honoured: with ``observation_nan_policy`` other than ``"ignore"``, or more samples than ``max_cholesky_size``
    (where GPyTorch solves iteratively), the answer is ``False`` and the caller keeps GPyTorch's objective."""
    model = mll.model
    if not isinstance(mll, ExactMarginalLogLikelihood) or type(mll.likelihood) is not GaussianLikelihood:
        return False
    inputs = getattr(model, "train_inputs", None)
    if inputs is None or len(inputs) != 1 or inputs[0].dim() != 2 or model.train_targets.dim() != 1:
        return False
    if getattr(model, "input_transform", None) is not None or getattr(model, "outcome_transform", None) is not None:
        return False
    if not isinstance(model.mean_module, (ConstantMean, ZeroMean)) or getattr(model.mean_module, "batch_shape", ()):
        return False
    if mll.likelihood.noise.numel() != 1:
        return False
    # GPyTorch's own settings that change its objective: NaN masking, and iterative solves above max_cholesky_size
    if settings.observation_nan_policy.value() != "ignore":
        return False
    if model.train_targets.numel() > settings.max_cholesky_size.value():
        return False
    return not any(True for _ in model.added_loss_terms())


class DenseObjective:
    r"""The negative objective :math:`\mathcal L` of ``mll`` (module docstring) as a callable without arguments,
    differentiable in the hyperparameters; the kernel's structure, the priors and the squared differences of the
    training inputs are resolved once. Requires :func:`supports_dense_objective`; the training data must not change
    between calls (build a new one after ``set_train_data``)."""

    def __init__(self, mll: ExactMarginalLogLikelihood) -> None:
        if not supports_dense_objective(mll):
            raise ValueError(
                "DenseObjective: this marginal likelihood is not supported (see supports_dense_objective): "
                f"{type(mll).__name__} of a {type(mll.model).__name__} with a {type(mll.likelihood).__name__}."
            )
        model = mll.model
        self.model, self.likelihood = model, mll.likelihood
        self.U = model.train_inputs[0]
        self.sqdiff = squared_differences(self.U.detach())
        self.kernel = _kernel_plan(model.covar_module)
        self.constant_mean = isinstance(model.mean_module, ConstantMean)
        self.priors = [(module, prior, closure) for _, module, prior, closure, _ in model.named_priors()]
        n = model.train_targets.numel()
        self.eye = torch.eye(n, dtype=self.U.dtype, device=self.U.device)
        self.log_2pi_term = 0.5 * n * math.log(2 * math.pi)

    def __call__(self) -> Tensor:
        model = self.model
        y = model.train_targets
        K = self.kernel(self.U, self.sqdiff)
        C = K + self.likelihood.noise.reshape(()) * self.eye
        resid = y - model.mean_module.constant.reshape(()) if self.constant_mean else y
        L = psd_safe_cholesky(C)
        alpha = torch.linalg.solve_triangular(L, resid.unsqueeze(-1), upper=False)
        log_lik = -0.5 * (alpha * alpha).sum() - torch.log(torch.diagonal(L)).sum() - self.log_2pi_term
        for module, prior, closure in self.priors:
            log_lik = log_lik + prior.log_prob(closure(module)).sum()
        return -log_lik / y.numel()


def dense_negative_objective(mll: ExactMarginalLogLikelihood) -> Tensor:
    r"""``-mll(model(*train_inputs), train_targets)`` as a dense computation (the module docstring's
    :math:`\mathcal L`), differentiable in the hyperparameters; one evaluation of :class:`DenseObjective`."""
    return DenseObjective(mll)()


def dense_loss_closure(mll: ExactMarginalLogLikelihood, parameters: dict[str, Tensor]) -> ForwardBackwardClosure:
    """A closure for :func:`botorch.optim.fit.fit_gpytorch_mll_scipy` (``closure=``): returns the loss of
    :class:`DenseObjective` and the gradients of ``parameters``, in the order of the dict."""
    return ForwardBackwardClosure(forward=DenseObjective(mll), parameters=parameters)
