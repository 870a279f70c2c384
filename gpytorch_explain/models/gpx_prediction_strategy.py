#!/usr/bin/env python3
r"""GPyTorch's exact prediction strategy for GPX, with accurate solves for its derived quantities."""

from __future__ import annotations

import contextlib
import math

import torch
from gpytorch import settings as gsettings
from gpytorch.kernels import GridInterpolationKernel
from gpytorch.lazy import LazyEvaluatedKernelTensor
from gpytorch.models.exact_prediction_strategies import DefaultPredictionStrategy
from gpytorch.utils.memoize import cached
from linear_operator import to_dense
from linear_operator.operators import (
    InterpolatedLinearOperator,
    LinearOperator,
    MatmulLinearOperator,
    to_linear_operator,
)
from torch import Tensor

from .. import settings as explain_settings
from ..operators import GPXInducingLinearOperator
from ..operators.sample_diag_added_linear_operator import _without_sample_diagonal
from ..utils import dense_cholesky, dense_limit, solve_checked, uses_dense_path
from ..utils.memory import available_memory

__all__ = ["GPXPredictionStrategy", "dense_limit"]


def _interpolated(op) -> bool:
    """Whether ``op`` holds a KISS-GP (interpolated) operator or a lazily evaluated KISS-GP kernel: such bases keep the
    count limit, since densifying them row by row is no cheaper than their own iterative path."""
    if isinstance(op, InterpolatedLinearOperator):
        return True
    if isinstance(op, LazyEvaluatedKernelTensor):
        return any(isinstance(m, GridInterpolationKernel) for m in op.kernel.modules())
    return isinstance(op, LinearOperator) and any(_interpolated(arg) for arg in op._args)


class GPXPredictionStrategy(DefaultPredictionStrategy):
    r"""GPyTorch's exact prediction strategy with accurate solves for GPX's derived quantities.

    * Up to ``n = max(gpytorch.settings.max_cholesky_size, gpytorch_explain.settings.max_cholesky_size)``, and
      above it while the factor fits :class:`gpytorch_explain.settings.dense_memory_budget` (see
      :func:`gpytorch_explain.utils.uses_dense_path`), one Cholesky factor :math:`\mathbf L` of :math:`\mathbf C`
      serves the mean cache :math:`\boldsymbol\alpha = \mathbf C^{-1}\mathbf y`, the latent predictive covariance
      and the weight posterior, so that :math:`\mathbb E[f_*] = \mathbf z_*^\top\mathbb E[\mathbf w_*]` and
      :math:`\operatorname{Var}[f_*] = \mathbf z_*^\top\operatorname{Cov}[\mathbf w_*]\mathbf z_*` hold to round-off.
      The factor is built in one :math:`n \times n` buffer (:func:`gpytorch_explain.utils.dense_cholesky`).
    * Otherwise GPyTorch's CG is used with the tolerance of :class:`gpytorch_explain.settings.solve_tolerance`
      (mean cache, latent covariance and weight covariances alike), or LOVE under
      ``gpytorch.settings.fast_pred_var()``.
    """

    @property
    def uses_cholesky(self) -> bool:
        """Whether the predictions go through the dense factor :meth:`train_cholesky` (see the class docstring)."""
        n = self.num_train
        if n <= dense_limit():
            return True
        covar = self.lik_train_train_covar
        grow = not self.uses_inducing and not _interpolated(covar)
        if not hasattr(self, "_free_memory"):  # read once, so that the path does not change with later allocations
            self._free_memory = available_memory(covar.device)
        batch = math.prod(covar.shape[:-2])
        return uses_dense_path(n, covar.dtype, covar.device, batch, free=self._free_memory, grow=grow)

    @cached(name="train_cholesky")
    def train_cholesky(self) -> Tensor:
        r"""Lower Cholesky factor :math:`\mathbf L` of :math:`\mathbf C` (dense, ``n x n``).

        Without autograd (``gpytorch.settings.detach_test_caches``, on by default, or no grad mode) it is built in
        place in one :math:`n \times n` buffer (:func:`~gpytorch_explain.utils.dense_cholesky`); with gradients
        through the caches, by linear_operator's Cholesky of the dense matrix.
        """
        covar = self.lik_train_train_covar
        if gsettings.detach_test_caches.on() or not torch.is_grad_enabled():
            return dense_cholesky(covar)
        with gsettings.max_cholesky_size(max(self.num_train, gsettings.max_cholesky_size.value())):
            return covar.cholesky().to_dense()

    @cached(name="mean_cache")
    def _mean_cache(self, nan_policy: str) -> Tensor:
        if nan_policy == "ignore" and self.uses_cholesky:
            mvn = self.likelihood(self.train_prior_dist, self.train_inputs)
            offset = (self.train_labels - mvn.loc).unsqueeze(-1)
            factor = self.train_cholesky()  # two triangular solves: cholesky_solve would copy the n x n factor
            half = torch.linalg.solve_triangular(factor, offset, upper=False)
            res = torch.linalg.solve_triangular(factor.mT, half, upper=True).squeeze(-1)
            return res.detach() if gsettings.detach_test_caches.on() else res
        if nan_policy != "ignore":
            return super()._mean_cache(nan_policy)
        tol = explain_settings.derived_solve_tolerance(self.train_labels.dtype)
        mvn = self.likelihood(self.train_prior_dist, self.train_inputs)
        offset = (self.train_labels - mvn.loc).unsqueeze(-1)
        covar = mvn.lazy_covariance_matrix.evaluate_kernel()
        detach = gsettings.detach_test_caches.on()
        with (
            gsettings.cg_tolerance(tol),
            gsettings.max_cg_iterations(explain_settings.cg_iterations(self.num_train)),
            torch.no_grad() if detach else contextlib.nullcontext(),  # detached anyway: CG refines in rounds
        ):
            if isinstance(covar, GPXInducingLinearOperator):  # exact (Woodbury)
                res = covar.solve(offset)
            else:
                res = solve_checked(covar, offset, what="the mean cache C^-1 (y - m)")
        res = res.squeeze(-1)
        return res.detach() if detach else res

    @property
    def uses_inducing(self) -> bool:
        """Whether the training covariance is the exactly solvable inducing-point (SGPR) form."""
        return isinstance(self.lik_train_train_covar, GPXInducingLinearOperator)

    def exact_predictive_covar(self, test_test_covar, test_train_covar):
        if self.uses_inducing and not self.uses_cholesky:
            # Woodbury solves are exact and cheap: no LOVE approximation needed
            with gsettings.fast_pred_var(False):
                return super().exact_predictive_covar(test_test_covar, test_train_covar)
        if gsettings.skip_posterior_variances.on() or (not self.uses_cholesky and gsettings.fast_pred_var.on()):
            return super().exact_predictive_covar(test_test_covar, test_train_covar)  # LOVE above the dense path
        if not self.uses_cholesky:
            return self._solve_predictive_covar(test_test_covar, test_train_covar)
        root = torch.linalg.solve_triangular(self.train_cholesky(), to_dense(test_train_covar).mT, upper=False)
        correction = MatmulLinearOperator(root.mT, root.mul(-1))
        if torch.is_tensor(test_test_covar):
            return to_linear_operator(test_test_covar) + correction
        return test_test_covar + correction

    def _solve_predictive_covar(self, test_test_covar, test_train_covar):
        r""":math:`\mathbf K_{**} - \mathbf K_{*X}\mathbf C^{-1}\mathbf K_{X*}`, with
        :math:`\mathbf C^{-1}\mathbf K_{X*}` by CG to GPX's derived tolerance
        (:func:`~gpytorch_explain.utils.solve_checked`), as for the weight covariances; GPyTorch's own exact path
        stops at ``eval_cg_tolerance`` (1e-2)."""
        covar = self.lik_train_train_covar
        if gsettings.detach_test_caches.on():
            covar = covar.detach()
        cross = to_dense(test_train_covar)
        tol = explain_settings.derived_solve_tolerance(cross.dtype)
        with gsettings.cg_tolerance(tol), gsettings.max_cg_iterations(explain_settings.cg_iterations(self.num_train)):
            rhs = solve_checked(covar.evaluate_kernel(), cross.mT, what="the latent predictive covariance C^-1 K_X*")
        correction = MatmulLinearOperator(cross, rhs.mul(-1))
        if torch.is_tensor(test_test_covar):
            return to_linear_operator(test_test_covar) + correction
        return test_test_covar + correction

    # ---------------------------------------------------------- lazily evaluated GPX kernels (issue 13)
    def __init__(self, train_inputs, train_prior_dist, train_labels, likelihood, root=None, inv_root=None):
        covar = train_prior_dist.lazy_covariance_matrix
        if isinstance(covar, LazyEvaluatedKernelTensor):
            # evaluated once here, so that the likelihood noise folds into GPX's structured operator (the inducing /
            # grid-feature Woodbury operator) and the caches below all use the same training covariance
            train_prior_dist = train_prior_dist.__class__(train_prior_dist.mean, covar.evaluate_kernel())
        super().__init__(train_inputs, train_prior_dist, train_labels, likelihood, root=root, inv_root=inv_root)

    def exact_prediction(self, test_mean, test_test_covar, test_train_covar):
        r"""GPyTorch's exact prediction, with the test/train block as a cross-covariance.

        ``ExactGP`` slices the lazily evaluated joint train+test covariance before evaluating it, so the test/train
        block is the kernel at ``(full[n:], full[:n])``, two views of one tensor at different row positions: a GPX
        kernel reads them as different samples even when the test inputs equal the training inputs, and the block
        arrives here as a cross-covariance (nothing to remove). Should it still carry a sample diagonal
        :math:`\sigma_w^2\|\mathbf z_i\|^2` (and, for an SGPR base in eval mode, its diagonal correction), e.g.
        from inputs that no longer share one tensor, it is removed here (also inside wrappers that delegate to this
        strategy, e.g. ``ScaleKernel``): test and training points are different samples, whose weight noises are
        independent. The test/test block keeps it.
        """
        if isinstance(test_train_covar, LazyEvaluatedKernelTensor):  # (an AddedDiag's evaluate_kernel re-adds)
            test_train_covar = test_train_covar.evaluate_kernel()
        test_train_covar, _ = _without_sample_diagonal(test_train_covar)
        return super().exact_prediction(test_mean, test_test_covar, test_train_covar)
