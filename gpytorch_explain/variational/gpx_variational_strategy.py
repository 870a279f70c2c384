#!/usr/bin/env python3
r"""The variational strategy of variational GPX: :math:`d` whitened latent GPs mixed per sample by :math:`\mathbf z_i`.

Used by :class:`~gpytorch_explain.VariationalGPXModel` (see there for the model). For a batch of inputs
:math:`[\mathbf X\mid\mathbf Z]` with :math:`\mathbf B = [\operatorname{diag}(\mathbf z_{\cdot 1})\mathbf A_1,
\dots, \operatorname{diag}(\mathbf z_{\cdot d})\mathbf A_d]`, :math:`\mathbf A_l = k(\mathbf X,\mathbf U_l)
\mathbf L_l^{-\top}` and :math:`q(\mathbf v) = \mathcal N(\mathbf m, \mathbf S)`,

.. math::

    q(\mathbf f) = \mathcal N\bigl(\mathbf B\mathbf m,\;
    (\mathbf K_{XX} + \sigma_w^2\mathbf I)\odot\mathbf Z\mathbf Z^\top + \mathbf B(\mathbf S - \mathbf I)
    \mathbf B^\top\bigr).

Example:
    >>> import torch
    >>> from gpytorch_explain import VariationalGPXModel
    >>> model = VariationalGPXModel(torch.randn(8, 2, dtype=torch.float64))
    >>> strategy = model.variational_strategy
    >>> type(strategy).__name__, strategy.num_features, strategy.num_inducing
    ('GPXVariationalStrategy', 2, 8)
    >>> model(torch.randn(5, 2, dtype=torch.float64)).weight_noise_variance.shape
    torch.Size([5])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from gpytorch.distributions import MultivariateNormal
from gpytorch.utils.memoize import cached
from linear_operator.operators import DiagLinearOperator, MatmulLinearOperator
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from .._compat import _VariationalDistribution, _VariationalStrategy
from ..distributions import GPXMultivariateNormal

if TYPE_CHECKING:
    from ..models.variational_gpx_model import VariationalGPXModel

__all__ = ["GPXVariationalStrategy"]


# ============================================================================ strategy
class GPXVariationalStrategy(_VariationalStrategy):
    r"""Whitened inducing-point strategy for :math:`d` latent GPs mixed per sample by :math:`\mathbf z_i`.

    Like GPyTorch's ``LMCVariationalStrategy``, with the mixing coefficients being each sample's own
    :math:`\mathbf z_i`. For a batch of inputs :math:`[\mathbf X \mid \mathbf Z]` (``n`` rows) let
    :math:`\mathbf A_l = k(\mathbf X, \mathbf U_l)\mathbf L_l^{-\top}` (:math:`n\times M`) and
    :math:`\mathbf B = [\operatorname{diag}(\mathbf z_{\cdot 1})\mathbf A_1, \dots,
    \operatorname{diag}(\mathbf z_{\cdot d})\mathbf A_d]` (:math:`n\times dM`). Then
    :math:`q(\mathbf f) = \int p(\mathbf f\mid\mathbf v)\,q(\mathbf v)\,d\mathbf v = \mathcal N(\mathbf B\mathbf m,\,
    \boldsymbol\Sigma_f)` with

    .. math::

        \boldsymbol\Sigma_f = \underbrace{(\mathbf K_{XX} + \sigma_w^2\mathbf I)\odot\mathbf Z\mathbf Z^\top}_{
        \text{GPX prior}} + \mathbf B(\mathbf S - \mathbf I)\mathbf B^\top,

    i.e. :math:`\operatorname{Cov}(f_i, f_j) = \sum_{l,l'} z_{il}z_{jl'}\operatorname{Cov}_q(g_l(\mathbf x_i),
    g_{l'}(\mathbf x_j)) + \sigma_w^2\delta_{ij}\|\mathbf z_i\|^2`. The covariance is lazy (a low-rank Hadamard term
    plus a rank-:math:`dM` term), so the ELBO's marginal variances cost :math:`O(n\,(dM)^2)` for a joint
    :math:`\mathbf S` and :math:`O(n\,dM^2)` for one block per latent; no :math:`n\times n` matrix is formed.
    The KL term is :math:`\mathrm{KL}[\mathcal N(\mathbf m,\mathbf S)\,\|\,\mathcal N(\mathbf 0,\mathbf I)]`.

    :param model: The :class:`VariationalGPXModel` (provides ``covar_module``, a
        :class:`~gpytorch_explain.GPXKernel`).
    :param inducing_points: :math:`\mathbf U`, ``(M, D)`` shared by all latents or ``(d, M, D)``.
    :param variational_distribution: Over the whitened values: ``num_inducing_points = d*M`` with no batch shape
        (joint over latents), or ``num_inducing_points = M`` with ``batch_shape = (d,)`` (latents independent).
    :param num_features: :math:`d`.
    :param learn_inducing_locations: Whether :math:`\mathbf U` is a parameter.
    :param jitter_val: Added to :math:`k(\mathbf U_l,\mathbf U_l)` before its Cholesky factorisation (default:
        ``gpytorch.settings.variational_cholesky_jitter``).
    """

    def __init__(
        self,
        model: VariationalGPXModel,
        inducing_points: Tensor,
        variational_distribution: _VariationalDistribution,
        num_features: int,
        learn_inducing_locations: bool = True,
        jitter_val: float | None = None,
    ):
        d = int(num_features)
        num_inducing = inducing_points.size(-2)
        shape = variational_distribution.shape()
        if shape not in (torch.Size([d * num_inducing]), torch.Size([d, num_inducing])):
            raise ValueError(
                f"The variational distribution must have shape ({d * num_inducing},) (joint over the d = {d} latents "
                f"and M = {num_inducing} inducing points) or batch_shape ({d},) with {num_inducing} inducing points, "
                f"got shape {tuple(shape)}."
            )
        super().__init__(model, inducing_points, variational_distribution, learn_inducing_locations, jitter_val)
        self.num_features = d

    @property
    def num_inducing(self) -> int:
        """:math:`M`, the number of inducing points per latent."""
        return self.inducing_points.size(-2)

    @property
    def joint(self) -> bool:
        """Whether :math:`q` is joint over the latents (else one independent block per latent)."""
        return self._variational_distribution.shape().numel() == self._variational_distribution.shape()[-1]

    @property
    def prior_distribution(self) -> MultivariateNormal:
        r""":math:`p(\mathbf v) = \mathcal N(\mathbf 0, \mathbf I)` in the variational distribution's shape."""
        shape = self._variational_distribution.shape()
        ref = self.inducing_points
        zeros = torch.zeros(shape, dtype=ref.dtype, device=ref.device)
        return MultivariateNormal(zeros, DiagLinearOperator(torch.ones_like(zeros)))

    def train(self, mode: bool = True) -> GPXVariationalStrategy:
        """Set training mode (``mode=True``) or eval mode, as ``torch.nn.Module.train``; clears the cached
        predictive quantities, which depend on the variational parameters."""
        if (self.training and not mode) or mode:
            self._clear_cache()
        return super().train(mode)

    def kl_divergence(self) -> Tensor:
        r""":math:`\mathrm{KL}[q(\mathbf v)\,\|\,p(\mathbf v)]`, summed over latents."""
        return super().kl_divergence().sum()

    # ------------------------------------------------------------------ pieces
    def _maybe_initialize(self) -> None:
        if not self.variational_params_initialized.item():
            self._variational_distribution.initialize_variational_distribution(self.prior_distribution)
            self.variational_params_initialized.fill_(1)

    @cached(name="cholesky_factor")
    def cholesky_factor(self) -> Tensor:
        r""":math:`\mathbf L_l`, the Cholesky factor of :math:`k(\mathbf U_l,\mathbf U_l)+\text{jitter}\,\mathbf I`."""
        inducing = self.inducing_points
        kuu = self.model.covar_module.base_kernel(inducing).to_dense()
        eye = torch.eye(kuu.size(-1), dtype=kuu.dtype, device=kuu.device)
        return psd_safe_cholesky(kuu + self.jitter_val * eye)

    def interp(self, x: Tensor) -> Tensor:
        r""":math:`\mathbf A_l = k(\mathbf X, \mathbf U_l)\mathbf L_l^{-\top}`, shape ``(d or 1, n, M)``."""
        inducing = self.inducing_points
        if inducing.dim() == 3:
            x = x.expand(inducing.size(0), *x.shape)
        kux = self.model.covar_module.base_kernel(inducing, x).to_dense()
        res = torch.linalg.solve_triangular(self.cholesky_factor(), kux, upper=False).mT
        return res if res.dim() == 3 else res.unsqueeze(0)

    def moments(self) -> tuple[Tensor, Tensor]:
        r""":math:`\mathbf m` as ``(d, M)``; :math:`\mathbf S-\mathbf I` as ``(dM, dM)`` or per latent ``(d, M, M)``."""
        dist = self.variational_distribution
        d, num = self.num_features, self.num_inducing
        mean = dist.mean.reshape(d, num)
        covar = dist.covariance_matrix
        eye = torch.eye(covar.size(-1), dtype=covar.dtype, device=covar.device)
        return mean, covar - eye

    def apply_middle(self, factor: Tensor, middle: Tensor) -> Tensor:
        r"""Rows of ``factor`` (``(..., d, M)``, latent blocks) times :math:`\mathbf S - \mathbf I`, same shape."""
        if middle.dim() == 2:
            flat = factor.reshape(*factor.shape[:-2], -1) @ middle
            return flat.reshape(factor.shape)
        return torch.einsum("...lj,ljk->...lk", factor, middle)

    def full_middle(self, middle: Tensor) -> Tensor:
        r""":math:`\mathbf S - \mathbf I` as a dense ``(dM, dM)`` matrix."""
        return middle if middle.dim() == 2 else torch.block_diag(*middle.unbind(0))

    # ------------------------------------------------------------------ q(f)
    def __call__(self, x: Tensor, prior: bool = False, **kwargs) -> MultivariateNormal:
        if prior:
            return self.model.forward(x)
        if self.training:
            self._clear_cache()
        self._maybe_initialize()
        return self.forward(x)

    def forward(self, inputs: Tensor, *args, **kwargs) -> GPXMultivariateNormal:
        r""":math:`q(\mathbf f)` at inputs :math:`[\mathbf X\mid\mathbf Z]` (``(n, D+d)``; ``(n, D)`` when z = x),
        carrying the weight-noise variance :math:`\sigma_w^2\|\mathbf z_i\|^2` for
        :class:`~gpytorch_explain.mlls.GPXVariationalELBO`."""
        covar_module = self.model.covar_module
        x, z = covar_module.split_inputs(inputs)
        mean_v, middle = self.moments()
        factor = z.mT.unsqueeze(-1) * self.interp(x)  # (d, n, M): rows z_il A_l[i]
        factor = factor.transpose(0, 1)  # (n, d, M) = B
        mean = (factor * mean_v).sum((-1, -2))
        factor_mid = self.apply_middle(factor, middle)
        n = factor.size(0)
        low_rank = MatmulLinearOperator(factor.reshape(n, -1), factor_mid.reshape(n, -1).mT)
        covar = covar_module(inputs) + low_rank
        return GPXMultivariateNormal(mean, covar, weight_noise_variance=covar_module.weight_noise * z.square().sum(-1))
