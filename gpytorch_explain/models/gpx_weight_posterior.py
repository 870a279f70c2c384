#!/usr/bin/env python3
r"""The posterior of GPX's local weights and, from it, the latent predictive in feature space.

For a :class:`~gpytorch_explain.GPXModel` with :math:`\boldsymbol\alpha = \mathbf C^{-1}(\mathbf y - \mathbf m)` and
:math:`\mathbf B_{i,(p,l)} = k(\mathbf x_p^*, \mathbf x_i)\,\tilde z_{il}` (the kernel's scaled features),

.. math::

    \mathbb E[\tilde{\mathbf w}_*] = \mathbf B^\top\boldsymbol\alpha, \qquad
    \operatorname{Cov}[\tilde{\mathbf w}_*] = (\mathbf K_{**} + \sigma_w^2\mathbf I)\otimes\mathbf I_d
    - \mathbf B^\top\mathbf C^{-1}\mathbf B ,

held lazily (:class:`~gpytorch_explain.operators.WeightPosteriorLinearOperator`). With an inducing-point or
grid-feature base, :math:`\mathbf K = \boldsymbol\Phi\boldsymbol\Phi^\top` and the same posterior is formed in
feature space (:class:`~gpytorch_explain.operators.InducingWeightPosteriorLinearOperator`), and the latent
predictive :math:`f_* = \tilde{\mathbf w}_*^\top\tilde{\mathbf z}_*` follows from it without any
:math:`m\times n` matrix. :meth:`GPXModel.predict_weights` scales these to the raw features.

Example:
    >>> import torch
    >>> from gpytorch_explain import GPXModel
    >>> x = torch.randn(20, 2, dtype=torch.float64)
    >>> model = GPXModel(x, x[:, 0]).eval()
    >>> post = weight_posterior(model, x[:3])
    >>> torch.allclose(post.mean, model.predict_weights(x[:3]).mean)
    True
"""

from __future__ import annotations

import torch
from gpytorch import settings as gsettings
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.kernels import InducingPointKernel
from linear_operator import to_dense
from linear_operator.operators import (
    DiagLinearOperator,
    LowRankRootAddedDiagLinearOperator,
    LowRankRootLinearOperator,
    ZeroLinearOperator,
)
from torch import Tensor

from ..errors import ModelStateError
from ..kernels.gpx_kernel import inducing_features
from ..kernels.ski_features import grid_features
from ..operators import InducingWeightPosteriorLinearOperator, WeightPosteriorLinearOperator
from ..utils.gp import kernel_diag

__all__ = ["inducing_weight_posterior", "latent_in_feature_space", "weight_posterior"]


def weight_posterior(model, x: Tensor) -> MultitaskMultivariateNormal:
    r"""The weights of the kernel's features :math:`\tilde{\mathbf z} = \mathbf c \odot \mathbf z`."""
    model._drop_stale_caches()
    model._cover_grid(x)
    strategy = model._build_prediction_strategy()
    train_x, train_z = model._train_xz()
    detach = gsettings.detach_test_caches.on()
    alpha = strategy.mean_cache
    if detach:
        train_x, train_z = train_x.detach(), train_z.detach()

    if strategy.uses_inducing and not strategy.uses_cholesky:
        return inducing_weight_posterior(model, x, strategy, alpha, detach)
    # (KISS-GP bases through the kernel's exact grid features, so that the grid never moves in eval mode)
    cross = model.covar_module.base_covariance(x, train_x).to_dense()  # (m, n)
    mean = cross @ (train_z * alpha.unsqueeze(-1))  # (m, d)
    prior = model.covar_module.base_covariance(x).add_diagonal(model.weight_noise.expand(x.size(0)))

    if strategy.uses_cholesky:
        # exact, through the one Cholesky factor of C (also under fast_pred_var: at this size it
        # is both exact and cheaper than a LOVE root accurate enough for the weights)
        factor = strategy.train_cholesky()
        factor_type = "cholesky"
    elif gsettings.fast_pred_var.on():
        # LOVE: GPyTorch's low-rank root R of C^{-1} (rank: max_root_decomposition_size)
        factor = to_dense(strategy.covar_cache)
        factor_type = "root"
    else:
        # exact through CG solves with C (GPyTorch's iterative path); costly for many points
        factor = strategy.lik_train_train_covar
        factor = factor.detach() if detach else factor
        factor_type = "solve"
    covar = WeightPosteriorLinearOperator(prior, cross, train_z, factor, factor_type=factor_type)
    return MultitaskMultivariateNormal(mean, covar, interleaved=True)


def inducing_weight_posterior(model, x: Tensor, strategy, alpha: Tensor, detach: bool) -> MultitaskMultivariateNormal:
    r"""Weights with an inducing-point base, in inducing space (:math:`O(dM)` mean, :math:`O(d^2M^2)`
    covariance per point, independent of :math:`n`); see
    :class:`~gpytorch_explain.operators.InducingWeightPosteriorLinearOperator`."""
    if x.dim() != 2 or alpha.dim() != 1:
        raise NotImplementedError("Batched GPX models with an inducing-point base kernel are not supported.")
    base = model.covar_module.base_kernel
    train_covar = strategy.lik_train_train_covar
    phi, train_z = train_covar.phi, train_covar.z
    chol = train_covar.capacitance_cholesky
    if detach:
        phi, train_z, chol = phi.detach(), train_z.detach(), chol.detach()
    if isinstance(base, InducingPointKernel):
        phi_test = inducing_features(base, x)  # (m, M)
    else:  # KISS-GP through exact grid features: the same grid and root as the training features
        phi_test = grid_features(base, x)[0]
        if phi_test.size(-1) != phi.size(-1):
            raise ModelStateError(
                "The KISS-GP grid root changed since the training covariance was cached (the "
                "hyperparameters or the grid changed in eval mode); call model.train() and model.eval() again."
            )
    mean = phi_test @ (phi.mT @ (train_z * alpha.unsqueeze(-1)))  # (m, d)
    prior_diag = model.weight_noise.expand(x.size(0))
    if isinstance(base, InducingPointKernel) and gsettings.sgpr_diagonal_correction.on():
        ipk = base
        exact = to_dense(kernel_diag(ipk.base_kernel, x))
        prior_diag = prior_diag + (exact - phi_test.pow(2).sum(-1)).clamp_min(0)
    covar = InducingWeightPosteriorLinearOperator(DiagLinearOperator(prior_diag), phi_test, chol, model.num_features)
    return MultitaskMultivariateNormal(mean, covar, interleaved=True)


def latent_in_feature_space(model, inputs: Tensor) -> MultivariateNormal:
    r"""The latent predictive of :math:`f_* = \mathbf w_*^\top\mathbf z_*` with an inducing-point or grid-feature
    base, from the weight posterior: nothing of size :math:`m \times n`, and no training features recomputed.

    With :math:`\operatorname{Cov}[\mathbf w_*] = \mathbf P \otimes \mathbf I_d + \mathbf H^\top\mathbf H`
    (:class:`~gpytorch_explain.operators.InducingWeightPosteriorLinearOperator`) and :math:`\mathbf r_p =
    \mathbf z_p \otimes \boldsymbol\phi_p`, contracting with :math:`\mathbf z_*` gives
    :math:`\operatorname{Cov}[\mathbf f_*] = \mathbf P \odot \mathbf Z_*\mathbf Z_*^\top + \mathbf G^\top\mathbf G`,
    :math:`\mathbf G = \mathbf L^{-1}\mathbf R_*^\top`: :math:`O(m d^2 M^2)`, the same numbers as GPyTorch's
    joint train/test evaluation.
    """
    x, z = model.covar_module.split_inputs(inputs)  # z: the kernel's (scaled) features, as the weights below
    post = weight_posterior(model, x)
    mean = (post.mean * z).sum(-1) + model.mean_module(inputs)
    if gsettings.skip_posterior_variances.on():
        return MultivariateNormal(mean, ZeroLinearOperator(mean.size(-1), mean.size(-1), dtype=mean.dtype))
    weights_covar = post.lazy_covariance_matrix
    phi = weights_covar.test_features  # (m, M)
    rows = (z.unsqueeze(-1) * phi.unsqueeze(-2)).reshape(phi.size(0), -1)  # R_*: (m, dM), block l holds z_l φ
    root = torch.linalg.solve_triangular(weights_covar.capacitance_cholesky, rows.mT, upper=False)  # G: (dM, m)
    prior = weights_covar.prior_covar.diagonal(dim1=-1, dim2=-2) * z.pow(2).sum(-1)
    covar = LowRankRootAddedDiagLinearOperator(LowRankRootLinearOperator(root.mT), DiagLinearOperator(prior))
    return MultivariateNormal(mean, covar)
