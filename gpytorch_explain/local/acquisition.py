#!/usr/bin/env python3
r"""Acquisitions for local explanation, run through BoTorch's ``optimize_acqf``.

The paper's acquisitions follow GPyOpt, which *minimises* the objective (here the standardised
surrogate of the black box, so ``jitter`` is in units of the output's standard deviation):

* ``"ei"``: GPyOpt's EI with jitter :math:`\xi` is
  :math:`\mathbb E[\max(f_{\min} - \xi - f(\mathbf u), 0)]` with :math:`f_{\min}` the smallest
  posterior mean at the samples, i.e. BoTorch's ``ExpectedImprovement(best_f=f_min - ξ, maximize=False)``
  (GPyOpt normalises the outputs by default, as we do, so ``ξ`` has the same meaning);
* ``"pi"``/``"mpi"``: :math:`\Phi((f_{\min} - \xi - \mu)/\sigma)` =
  ``ProbabilityOfImprovement(best_f=f_min - ξ, maximize=False)``;
* ``"lcb"``: GPyOpt's LCB maximises :math:`-\mu + w\sigma` with the exploration weight ``w``
  (GPyOpt's ``acquisition_weight``, default 2; GPyOpt ignores the jitter for LCB) =
  ``UpperConfidenceBound(beta=w², maximize=False)``.

Beyond the paper: EI and PI are optimised on the log scale (BoTorch's ``LogExpectedImprovement`` and
``LogProbabilityOfImprovement``): the same maximiser as GPyOpt's EI/PI, without their vanishing gradients.

Beyond the paper: ``"variance"`` (``PosteriorStandardDeviation``, maximum posterior variance),
``"integrated_variance"`` (``qNegIntegratedPosteriorVariance`` over Sobol points of the box) and
``"gradient"`` (:class:`GradientVarianceReduction`, aimed at the explanation itself).
"""

from __future__ import annotations

import torch
from botorch.acquisition import AcquisitionFunction, LogExpectedImprovement, UpperConfidenceBound
from botorch.acquisition.active_learning import qNegIntegratedPosteriorVariance
from botorch.acquisition.analytic import LogProbabilityOfImprovement, PosteriorStandardDeviation
from botorch.models.model import Model
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from ..utils.gp import kernel_diag
from .cached_posterior import CachedPosteriorModel

__all__ = ["ACQUISITIONS", "GradientVarianceReduction", "gradient_cross_covariance", "make_acquisition"]

#: accepted acquisition names
ACQUISITIONS = ("lcb", "ei", "pi", "mpi", "variance", "integrated_variance", "gradient")


def _kernel_gradient_at(kernel, u0: Tensor, Z: Tensor) -> Tensor:
    r""":math:`\partial k(\mathbf u, \mathbf z)/\partial\mathbf u` at :math:`\mathbf u_0` for each row of ``Z``.

    ``Z`` is ``(..., n, d)``; returns ``(..., n, d)``. Autograd of the kernel's own ``forward``
    (``diag=True``) with ``u0`` replicated per row, so any differentiable stationary or non-stationary
    kernel works and the result stays differentiable in ``Z`` (``create_graph``).
    """
    with torch.enable_grad():
        U0 = u0.expand_as(Z).clone().requires_grad_(True)
        k = kernel_diag(kernel, U0, Z)
        k = k if torch.is_tensor(k) else k.to_dense()
        (g,) = torch.autograd.grad(k.sum(), U0, create_graph=True)
    return g


def gradient_cross_covariance(model: Model, u0: Tensor, Z: Tensor) -> tuple[Tensor, Tensor]:
    r"""Posterior cross-covariance of :math:`\nabla f(\mathbf u_0)` with noisy observations at ``Z``; their covariance.

    For a GP with training inputs :math:`\mathbf X` and :math:`\mathbf C = \mathbf K_{XX} + \sigma_n^2\mathbf I`,

    .. math::

        \mathbf c(\mathbf z) = \partial k(\mathbf u_0, \mathbf z) - \partial\mathbf k(\mathbf u_0, \mathbf X)\,
        \mathbf C^{-1}\mathbf k(\mathbf X, \mathbf z), \qquad
        \mathbf V = \mathbf K_{ZZ} + \sigma_n^2\mathbf I - \mathbf K_{ZX}\mathbf C^{-1}\mathbf K_{XZ}.

    ``Z``: ``(b, q, d)``; returns ``c`` ``(b, d, q)`` and ``V`` ``(b, q, q)``.
    """
    kernel = model.covar_module
    X = model.train_inputs[0]
    noise = model.likelihood.noise.reshape(())
    n = X.size(-2)
    C = kernel(X).to_dense() + noise * torch.eye(n, dtype=X.dtype, device=X.device)
    L = torch.linalg.cholesky(C)
    A = _kernel_gradient_at(kernel, u0, X).detach().mT  # (d, n)
    W = torch.linalg.solve_triangular(L, A.mT, upper=False)  # (n, d)
    kXZ = kernel(X, Z).to_dense()  # (b, n, q)
    V_half = torch.linalg.solve_triangular(L, kXZ, upper=False)  # (b, n, q)
    c = _kernel_gradient_at(kernel, u0, Z).mT - W.mT @ V_half  # (b, d, q)
    q = Z.size(-2)
    V = kernel(Z).to_dense() + noise * torch.eye(q, dtype=Z.dtype, device=Z.device) - V_half.mT @ V_half
    return c, V


class GradientVarianceReduction(AcquisitionFunction):
    r"""Reduction of :math:`\operatorname{tr}\operatorname{Cov}[\nabla f(\mathbf u_0)]` from observing the batch ``Z``.

    Observing :math:`\mathbf y_Z` changes the gradient's posterior covariance by
    :math:`-\mathbf c\,\mathbf V^{-1}\mathbf c^\top` (``gradient_cross_covariance`` in this module), independently of
    the observed values (a GP's posterior covariance does not depend on :math:`\mathbf y`), so the fantasy is
    exact and the acquisition value is :math:`\operatorname{tr}(\mathbf c\mathbf V^{-1}\mathbf c^\top)`, to be
    maximised. Scale-aware variants (e.g. weighting feature :math:`i` by :math:`1/(r\sigma_i)^2`) are not
    needed here: the surrogate already lives in box units.

    Example:
        >>> import torch
        >>> from gpytorch_explain.local.acquisition import GradientVarianceReduction
        >>> from gpytorch_explain.local.surrogate import make_surrogate
        >>> U = torch.rand(6, 2, dtype=torch.float64) * 2 - 1
        >>> gp = make_surrogate(U, U.sum(-1)).eval()
        >>> acq = GradientVarianceReduction(gp, torch.zeros(2, dtype=torch.float64))
        >>> acq(torch.rand(4, 1, 2, dtype=torch.float64)).shape
        torch.Size([4])
    """

    def __init__(self, model: Model, u0: Tensor):
        super().__init__(model=model)
        self.register_buffer("u0", u0.detach().clone())

    @t_batch_mode_transform()
    def forward(self, X: Tensor) -> Tensor:
        c, V = gradient_cross_covariance(self.model, self.u0, X)
        LV = torch.linalg.cholesky(V)
        S = torch.linalg.solve_triangular(LV, c.mT, upper=False)  # (b, q, d)
        return (S**2).sum((-1, -2))


def make_acquisition(
    name: str,
    model: Model,
    u0: Tensor,
    bounds: Tensor,
    *,
    jitter: float = 0.01,
    exploration_weight: float = 2.0,
    num_mc_points: int = 256,
    seed: int | None = None,
    cached: bool = True,
) -> AcquisitionFunction:
    """Build the named acquisition (see the module docstring) on ``model``; all are maximised.

    With ``cached`` (default) the analytic acquisitions (``"lcb"``, ``"ei"``, ``"pi"``/``"mpi"``, ``"variance"``)
    evaluate ``model``'s posterior through :class:`~gpytorch_explain.local.cached_posterior.CachedPosteriorModel`
    (the same exact posterior, about twice as fast in the optimiser's loop) when ``model`` allows it.
    """
    if name in ("ei", "pi", "mpi"):
        with torch.no_grad():
            f_min = model.posterior(model.train_inputs[0]).mean.min()
        best_f = f_min - jitter
    if cached and name in ("lcb", "ei", "pi", "mpi", "variance"):
        try:
            model = CachedPosteriorModel(model)
        except ValueError:  # transforms, batches or another likelihood: GPyTorch's own path
            pass
    if name in ("ei", "pi", "mpi"):
        if name == "ei":
            return LogExpectedImprovement(model, best_f=best_f, maximize=False)
        return LogProbabilityOfImprovement(model, best_f=best_f, maximize=False)
    if name == "lcb":
        return UpperConfidenceBound(model, beta=exploration_weight**2, maximize=False)
    if name == "variance":
        return PosteriorStandardDeviation(model)
    if name == "integrated_variance":
        from botorch.utils.sampling import draw_sobol_samples

        mc_points = draw_sobol_samples(bounds=bounds, n=num_mc_points, q=1, seed=seed).squeeze(-2)
        return qNegIntegratedPosteriorVariance(model, mc_points=mc_points)
    if name == "gradient":
        return GradientVarianceReduction(model, u0)
    raise ValueError(f"Unknown acquisition {name!r}; choose one of {ACQUISITIONS}.")
