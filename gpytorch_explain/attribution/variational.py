#!/usr/bin/env python3
r"""Attribution GPs of variational (``ApproximateGP``) models: gradients and integrated gradients under :math:`q`.

A sparse variational GP with inducing points :math:`\mathbf Z` (:math:`u` of them) approximates the posterior by

.. math::

    q(f) = \int p(f \mid \mathbf u)\, q(\mathbf u)\, d\mathbf u, \qquad q(\mathbf u) = \mathcal N(\mathbf m, \mathbf S),

a GP whose mean and covariance are linear in the prior's. Any linear functional :math:`\mathcal L` of :math:`f`
(the gradient :math:`\partial_i`, integrated gradients :math:`\mathrm{IG}_i`) is therefore Gaussian under
:math:`q` too. With :math:`\mathbf K_{\mathbf{UU}} + \epsilon\mathbf I = \mathbf L\mathbf L^\top` (the strategy's
own jittered Cholesky factor) and :math:`\mathbf B = \operatorname{Cov}(\mathbf u, \mathcal L f(\mathbf x))`
(``u × mD``, :meth:`DerivedCovariance.cross`):

* ``VariationalStrategy`` (whitened, :math:`\mathbf u = \mathbf L\tilde{\mathbf u}`,
  :math:`q(\tilde{\mathbf u}) = \mathcal N(\mathbf m, \mathbf S)`):

  .. math::

      \mathbb E_q[\mathcal L f(\mathbf x)] = \mathcal L\mu(\mathbf x) + (\mathbf L^{-1}\mathbf B)^\top \mathbf m,
      \qquad
      \operatorname{Cov}_q = \mathbf K_{\mathcal L\mathcal L} - (\mathbf L^{-1}\mathbf B)^\top
      (\mathbf I - \mathbf S)(\mathbf L^{-1}\mathbf B);

* ``UnwhitenedVariationalStrategy`` (:math:`q(\mathbf u) = \mathcal N(\mathbf m, \mathbf S)` directly):

  .. math::

      \mathbb E_q[\mathcal L f(\mathbf x)] = \mathcal L\mu(\mathbf x) + \mathbf B^\top \mathbf K^{-1}
      (\mathbf m - \mu(\mathbf Z)),
      \qquad
      \operatorname{Cov}_q = \mathbf K_{\mathcal L\mathcal L} - \mathbf B^\top \mathbf K^{-1}
      (\mathbf K - \mathbf S)\mathbf K^{-1}\mathbf B,

  which is the whitened form with :math:`\mathbf m_w = \mathbf L^{-1}(\mathbf m - \mu(\mathbf Z))` and
  :math:`\mathbf S_w = \mathbf L^{-1}\mathbf S\mathbf L^{-\top}`.

Both are returned as the exact path's :class:`~gpytorch_explain.attribution.AttributionDistribution`, with the
lazy :class:`~gpytorch_explain.operators.AttributionPosteriorLinearOperator` (Cholesky factor :math:`\mathbf L`,
middle matrix :math:`\mathbf I - \mathbf S_w`) and mean :math:`\mathbf B^\top \mathbf a + \mathcal L\mu(\mathbf x)`,
:math:`\mathbf a = \mathbf L^{-\top}\mathbf m_w`.

As in GPyTorch, the prior mean enters only at :math:`\mathbf x` for the whitened strategy (its
:math:`\tilde{\mathbf u}` has prior mean zero) and as :math:`\mathbf m - \mu(\mathbf Z)` for the unwhitened one.
GPyTorch's whitened predictive covariance adds the jitter :math:`\epsilon` to the diagonal of
:math:`\operatorname{Cov}_q(f(\mathbf x))` as well; that term is white noise at the evaluation points, has no
derivative and is not part of the attribution GPs (nor of :meth:`VariationalConditioning.latent`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gpytorch.distributions import Delta, MultivariateNormal
from gpytorch.kernels import Kernel
from gpytorch.means import Mean
from gpytorch.models import ApproximateGP
from gpytorch.variational import (
    IndependentMultitaskVariationalStrategy,
    LargeBatchVariationalStrategy,
    LMCVariationalStrategy,
    UnwhitenedVariationalStrategy,
    VariationalStrategy,
)
from linear_operator import to_dense
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from .._compat import _linalg_dtype_cholesky
from ..errors import ModelStateError
from ._quadrature import point_chunks
from .attribution_distribution import AttributionDistribution
from .derived import DEFAULT_ORDER, DerivedCovariance, functional_mean
from .functionals import Functional, GradientFunctional, IntegratedGradientFunctional, check_point_tensor

__all__ = [
    "SUPPORTED_STRATEGIES",
    "VariationalConditioning",
    "variational_conditioning",
    "variational_functional_posterior",
    "variational_inducing_points",
    "variational_model_parts",
]

#: strategies whose q(u) lives in whitened coordinates (same eval-mode predictive as ``VariationalStrategy``)
_WHITENED: tuple[type, ...] = (VariationalStrategy, LargeBatchVariationalStrategy)
#: strategies whose q(u) is over the inducing values themselves
_UNWHITENED: tuple[type, ...] = (UnwhitenedVariationalStrategy,)
#: wrappers turning a batch of independent latent GPs into tasks (``MultitaskVariationalStrategy`` is its
#: deprecated alias and a subclass)
_MULTITASK: type = IndependentMultitaskVariationalStrategy

#: linear model of coregionalisation over a batch of independent latent GPs (exact type)
_LMC: type = LMCVariationalStrategy

#: every strategy type accepted (exact types: subclasses may change the predictive and are rejected)
SUPPORTED_STRATEGIES: tuple[type, ...] = (*_WHITENED, *_UNWHITENED, _MULTITASK, _LMC)


def _supported_names() -> str:
    inner = ", ".join(t.__name__ for t in (*_WHITENED, *_UNWHITENED))
    return f"{inner}, and {_MULTITASK.__name__} or {_LMC.__name__} wrapping one of them"


# --------------------------------------------------------------------------- model inspection
def _base_strategy(model: ApproximateGP):
    """The strategy that holds q(u) and the inducing points, after checking that every layer is supported."""
    strategy = getattr(model, "variational_strategy", None)
    if strategy is None:
        raise NotImplementedError("The ApproximateGP has no `variational_strategy` attribute.")
    wrapper = None
    if isinstance(strategy, _MULTITASK) or type(strategy) is _LMC:
        wrapper, strategy = strategy, strategy.base_variational_strategy
    if type(strategy) not in (*_WHITENED, *_UNWHITENED):
        name = type(strategy).__name__ if wrapper is None else f"{type(wrapper).__name__}({type(strategy).__name__})"
        raise NotImplementedError(
            f"Attribution GPs are not available for the variational strategy {name}; supported: {_supported_names()} "
            "(exact types: subclasses may change the predictive distribution)."
        )
    if getattr(strategy, "model", None) is not model:
        raise NotImplementedError("The variational strategy must belong to the model itself (no nested strategies).")
    if isinstance(wrapper, _MULTITASK):
        _check_task_dim(model, wrapper, strategy)
    elif wrapper is not None:
        _check_latent_dim(model, wrapper, strategy)
    return strategy


def _lmc_wrapper(model: ApproximateGP):
    """The model's ``LMCVariationalStrategy``, or ``None``."""
    strategy = getattr(model, "variational_strategy", None)
    return strategy if type(strategy) is _LMC else None


def _check_latent_dim(model: ApproximateGP, wrapper, base) -> None:
    batch = torch.broadcast_shapes(
        base.inducing_points.shape[:-2],
        base._variational_distribution.batch_shape,
        getattr(getattr(model, "covar_module", None), "batch_shape", torch.Size()),
    )
    dim = wrapper.latent_dim
    coef = wrapper.lmc_coefficients
    if not -len(batch) <= dim < 0 or batch[dim] != wrapper.num_latents or coef.size(dim - 1) != wrapper.num_latents:
        raise NotImplementedError(
            f"{type(wrapper).__name__} needs a batch of {wrapper.num_latents} latent GPs at batch dimension "
            f"latent_dim = {dim}; the base strategy's batch shape is {tuple(batch)} and lmc_coefficients has shape "
            f"{tuple(coef.shape)} (repeated single latents are not supported)."
        )


def _check_task_dim(model: ApproximateGP, wrapper, base) -> None:
    batch = torch.broadcast_shapes(
        base.inducing_points.shape[:-2],
        base._variational_distribution.batch_shape,
        getattr(getattr(model, "covar_module", None), "batch_shape", torch.Size()),
    )
    dim = wrapper.task_dim
    if not -len(batch) <= dim < len(batch) or batch[dim] != wrapper.num_tasks:
        raise NotImplementedError(
            f"{type(wrapper).__name__} needs a batch of {wrapper.num_tasks} latent GPs at batch dimension "
            f"task_dim = {dim}; the base strategy's batch shape is {tuple(batch)} (repeated single GPs are not "
            "supported)."
        )


def variational_model_parts(model: ApproximateGP) -> tuple[Kernel, Mean | None]:
    r"""The prior kernel and mean of a supported ``ApproximateGP`` (``covar_module``, ``mean_module``).

    Checks the model structure only (not its mode or state): the variational strategy must be one of
    :data:`SUPPORTED_STRATEGIES` (exact types) and the model must define its prior through a ``covar_module``
    kernel (and optionally a ``mean_module``), i.e. ``forward(x)`` returns
    ``MultivariateNormal(mean_module(x), covar_module(x))`` as in the GPyTorch tutorials.

    :raises TypeError: ``model`` is not an ``ApproximateGP``.
    :raises NotImplementedError: unsupported strategy or model structure.
    """
    if not isinstance(model, ApproximateGP):
        raise TypeError(f"model must be a gpytorch ApproximateGP, got {type(model).__name__}.")
    _base_strategy(model)
    kernel = getattr(model, "covar_module", None)
    if not isinstance(kernel, Kernel):
        raise NotImplementedError(
            "The ApproximateGP needs a `covar_module` Kernel that defines its prior covariance (as in the GPyTorch "
            "tutorials); custom forward() compositions are not supported."
        )
    mean = getattr(model, "mean_module", None)
    if mean is not None and not isinstance(mean, Mean):
        raise NotImplementedError(f"mean_module must be a gpytorch Mean, got {type(mean).__name__}.")
    return kernel, mean


def variational_inducing_points(model: ApproximateGP, check_structure: bool = True) -> Tensor:
    r"""The inducing points :math:`\mathbf Z` of a supported ``ApproximateGP``, ``(*batch, u, D)``, detached.

    They play the role of an ExactGP's training inputs for input checks (``D``, dtype, device) and for the
    default integrated-gradients baseline (their mean).

    :param check_structure: Check that the model defines its prior through ``covar_module`` (the closed forms need
        it; the autograd fallback, which differentiates the model's own posterior, does not).
    """
    if check_structure:
        variational_model_parts(model)
    Z = _base_strategy(model).inducing_points
    return Z.detach()


# --------------------------------------------------------------------------- conditioning
@dataclass(frozen=True)
class VariationalConditioning:
    r"""Everything the attribution GPs need from a variational model, in whitened form.

    :math:`q(f)` is the GP with mean :math:`\mu(\mathbf x) + \mathbf k(\mathbf x, \mathbf Z)^\top\mathbf a` and
    covariance :math:`k(\mathbf x, \mathbf x') - \mathbf v(\mathbf x)^\top\mathbf M\,\mathbf v(\mathbf x')`,
    :math:`\mathbf v(\mathbf x) = \mathbf L^{-1}\mathbf k(\mathbf Z, \mathbf x)` (see the docstring of the module
    ``gpytorch_explain.attribution.variational``).

    :param kernel: The prior kernel :math:`k` (the model's ``covar_module``).
    :param mean_module: The prior mean :math:`\mu` (``None``: zero).
    :param inducing_points: :math:`\mathbf Z`, ``(*batch, u, D)``.
    :param cholesky: :math:`\mathbf L`, lower Cholesky factor of :math:`\mathbf K_{\mathbf{UU}} + \epsilon\mathbf I`,
        ``(*batch, u, u)``.
    :param weights: :math:`\mathbf a = \mathbf L^{-\top}\mathbf m_w`, ``(*batch, u)``.
    :param middle: :math:`\mathbf M = \mathbf I - \mathbf S_w`, symmetric, ``(*batch, u, u)``.
    """

    kernel: Kernel
    mean_module: Mean | None
    inducing_points: Tensor
    cholesky: Tensor
    weights: Tensor
    middle: Tensor

    def _batch(self, *shapes: torch.Size) -> torch.Size:
        return torch.broadcast_shapes(
            self.inducing_points.shape[:-2],
            self.cholesky.shape[:-2],
            self.weights.shape[:-1],
            self.middle.shape[:-2],
            *shapes,
        )

    def functional_posterior(
        self, functional: GradientFunctional | IntegratedGradientFunctional, x: Tensor, order: int = DEFAULT_ORDER
    ):
        r""":math:`q(\mathcal L f(\mathbf x))` at ``x`` (``(*batch, m, D)``), an ``AttributionDistribution``.

        Mean ``(*batch, m, D)``; covariance interleaved (row ``point * D + feature``), lazy.
        """
        from ..operators import AttributionPosteriorLinearOperator

        derived = DerivedCovariance(self.kernel, functional, order=order)
        Z = self.inducing_points
        chunks = point_chunks(x, Z, self._batch(x.shape[:-2]))
        if len(chunks) <= 1:
            rows = derived.cross(x, Z)  # (*b, m, D, u)
            batch = self._batch(rows.shape[:-3], x.shape[:-2])
            rows = rows.expand(*batch, *rows.shape[-3:])
            mean = (rows @ self.weights[..., None, :, None]).squeeze(-1)  # (*batch, m, D)
            covar = AttributionPosteriorLinearOperator(
                x, rows, self.cholesky, factor_type="cholesky", derived=derived, middle=self.middle
            )
        else:  # many points: the rows (m x D x u) are formed chunk by chunk, and lazily by the covariance
            mean = torch.cat(
                [(derived.cross(x[..., p, :], Z) @ self.weights[..., None, :, None]).squeeze(-1) for p in chunks],
                dim=-2,
            )
            batch = self._batch(x.shape[:-2])
            middle = self.middle.expand(*batch, *self.middle.shape[-2:])  # the operator takes q(u)'s batch from it
            covar = AttributionPosteriorLinearOperator(
                x, Z, self.cholesky, factor_type="cholesky", derived=derived, middle=middle, lazy_rows=True
            )
            batch = torch.broadcast_shapes(covar.batch_shape, mean.shape[:-2])
        if self.mean_module is not None:
            mean = mean + functional_mean(self.mean_module, functional, x, order=order)
        mean = mean.expand(*batch, *x.shape[-2:])
        return AttributionDistribution(mean, covar, interleaved=True)

    def latent(self, points: Tensor) -> tuple[Tensor, Tensor]:
        r"""Mean ``(*batch, P)`` and covariance ``(*batch, P, P)`` of :math:`q(f)` at ``points`` (``(*batch, P, D)``).

        The same formula as the attribution GPs (so completeness holds to round-off); it equals the model's own
        ``model(points)`` except for the whitened strategies' extra :math:`\epsilon\mathbf I` on the diagonal.
        """
        cross = to_dense(self.kernel(self.inducing_points, points))  # (*b, u, P)
        mean = (cross.mT @ self.weights.unsqueeze(-1)).squeeze(-1)
        if self.mean_module is not None:
            mean = mean + self.mean_module(points)
        v = torch.linalg.solve_triangular(self.cholesky, cross, upper=False)
        prior = to_dense(self.kernel(points, points))
        cov = prior - v.mT @ self.middle @ v
        batch = self._batch(points.shape[:-2], cov.shape[:-2])
        return mean.expand(*batch, points.size(-2)), cov.expand(*batch, *cov.shape[-2:])


def _ensure_initialised(strategy) -> None:
    """Bring q(u) into the state the model's own next prediction would use (as GPyTorch's ``__call__`` does)."""
    if isinstance(strategy, VariationalStrategy) and not bool(strategy.updated_strategy.item()):
        raise ModelStateError(
            "This VariationalStrategy holds parameters from an old GPyTorch version; call the model once "
            "(model(x)) so that GPyTorch converts them to whitened form, then compute attributions."
        )
    if not bool(strategy.variational_params_initialized.item()):
        with torch.no_grad():
            strategy._variational_distribution.initialize_variational_distribution(strategy.prior_distribution)
            strategy.variational_params_initialized.fill_(1)


def _check_prior(kernel: Kernel, mean: Mean | None, prior: MultivariateNormal, Z: Tensor) -> None:
    """``model.forward`` must be ``MultivariateNormal(mean_module(x), covar_module(x))`` (checked at Z)."""
    K_fwd = prior.lazy_covariance_matrix.to_dense()
    K_mod = to_dense(kernel(Z))
    mu_fwd = prior.mean
    mu_mod = mean(Z) if mean is not None else torch.zeros_like(mu_fwd)
    tol = 1e3 * torch.finfo(K_fwd.dtype).eps
    k_scale = K_fwd.abs().max().clamp_min(torch.finfo(K_fwd.dtype).tiny)
    m_scale = mu_fwd.abs().max().clamp_min(1.0)
    if K_fwd.shape[-2:] != K_mod.shape[-2:] or (K_fwd - K_mod).abs().max() > tol * k_scale:
        raise NotImplementedError(
            "model.forward(x) does not return covar_module(x) as its covariance; attribution GPs need "
            "forward(x) = MultivariateNormal(mean_module(x), covar_module(x))."
        )
    if (mu_fwd - mu_mod).abs().max() > tol * m_scale:
        raise NotImplementedError(
            "model.forward(x) does not return mean_module(x) (or zero without a mean_module) as its mean; attribution "
            "GPs need forward(x) = MultivariateNormal(mean_module(x), covar_module(x))."
        )


def _inducing_cholesky(strategy, induc_induc_covar) -> Tensor:
    r"""The strategy's own (cached) Cholesky factor of the jittered :math:`\mathbf K_{\mathbf{UU}}`, dense.

    ``_cholesky_factor`` is memoised: when the model has predicted in eval mode this is the very factor its
    predictions used; otherwise it is computed (and cached) as the model's next prediction would. A cached factor
    of another batch shape (from batched test inputs) is not reused.
    """
    L = to_dense(strategy._cholesky_factor(induc_induc_covar))
    if L.shape != induc_induc_covar.shape:
        dense = to_dense(induc_induc_covar)
        if isinstance(strategy, VariationalStrategy):
            dense = dense.type(_linalg_dtype_cholesky.value())
        L = psd_safe_cholesky(dense)
    return L


def variational_conditioning(model: ApproximateGP):
    r"""The whitened quantities :math:`(\mathbf Z, \mathbf L, \mathbf a, \mathbf M)` of a supported variational model.

    Returns a :class:`VariationalConditioning`; for an ``LMCVariationalStrategy`` an
    :class:`~gpytorch_explain.attribution.lmc.LMCConditioning` (the base strategy's conditioning over the latents and
    the mixing coefficients) with the same ``functional_posterior`` / ``latent`` interface, per task.

    Uses :math:`q(\mathbf u)` from ``strategy.variational_distribution`` (any Gaussian variational distribution:
    Cholesky, mean-field, natural, ...; a ``Delta`` distribution has :math:`\mathbf S = \mathbf 0`), the strategy's
    ``jitter_val`` and its cached Cholesky factor. Whitening solves run in the factor's dtype (float64 for
    ``VariationalStrategy``, as in GPyTorch); the results are cast to the inducing points' dtype.

    :raises ModelStateError: the model is in train mode (or holds pre-whitening legacy parameters).
    :raises NotImplementedError: unsupported strategy, variational distribution or model structure.
    """
    kernel, mean = variational_model_parts(model)
    if model.training:
        raise ModelStateError("Attributions need the model in eval mode: call model.eval() first.")
    strategy = _base_strategy(model)
    _ensure_initialised(strategy)
    Z = strategy.inducing_points
    dtype = Z.dtype

    prior = model.forward(Z)
    _check_prior(kernel, mean, prior, Z)
    induc_induc_covar = prior.lazy_covariance_matrix.add_jitter(strategy.jitter_val)
    L = _inducing_cholesky(strategy, induc_induc_covar)
    work = L.dtype

    dist = strategy.variational_distribution
    if isinstance(dist, MultivariateNormal):
        m, S = dist.mean, to_dense(dist.lazy_covariance_matrix)
    elif isinstance(dist, Delta):
        m, S = dist.mean, None
    else:
        raise NotImplementedError(
            f"Unsupported variational distribution output {type(dist).__name__}; expected a MultivariateNormal "
            "or a Delta."
        )
    m = m.to(work)
    S = S.to(work) if S is not None else None
    if type(strategy) in _UNWHITENED:
        # m_w = L^{-1}(m - μ(Z)),  S_w = L^{-1} S L^{-T}
        offset = (m - prior.mean.to(work)).unsqueeze(-1)
        batch = torch.broadcast_shapes(offset.shape[:-2], L.shape[:-2])
        L_b = L.expand(*batch, *L.shape[-2:])
        m = torch.linalg.solve_triangular(L_b, offset.expand(*batch, *offset.shape[-2:]), upper=False).squeeze(-1)
        if S is not None:
            batch = torch.broadcast_shapes(S.shape[:-2], L.shape[:-2])
            L_b = L.expand(*batch, *L.shape[-2:])
            half = torch.linalg.solve_triangular(L_b, S.expand(*batch, *S.shape[-2:]), upper=False)
            S = torch.linalg.solve_triangular(L_b, half.mT, upper=False).mT
    # a = L^{-T} m_w
    batch = torch.broadcast_shapes(m.shape[:-1], L.shape[:-2])
    L_b = L.expand(*batch, *L.shape[-2:])
    a = torch.linalg.solve_triangular(L_b.mT, m.expand(*batch, m.size(-1)).unsqueeze(-1), upper=True).squeeze(-1)
    eye = torch.eye(L.size(-1), dtype=work, device=L.device)
    middle = eye if S is None else eye - 0.5 * (S + S.mT)
    cond = VariationalConditioning(
        kernel=kernel,
        mean_module=mean,
        inducing_points=Z,
        cholesky=L.to(dtype),
        weights=a.to(dtype),
        middle=middle.to(dtype),
    )
    lmc = _lmc_wrapper(model)
    if lmc is not None:  # f_t = Σ_q a_qt g_q over the base strategy's latents
        from .lmc import LMCConditioning

        return LMCConditioning(base=cond, coefficients=lmc.lmc_coefficients.detach(), latent_dim=lmc.latent_dim)
    return cond


# --------------------------------------------------------------------------- the posterior
def _check_points(x, Z: Tensor) -> Tensor:
    check_point_tensor(x)
    D = Z.size(-1)
    if x.size(-1) != D:
        raise ValueError(f"x has {x.size(-1)} columns but the model's inducing points have D = {D}.")
    if not torch.isfinite(x).all():
        raise ValueError("x contains NaN or infinite values.")
    if x.dtype != Z.dtype:
        raise TypeError(f"x has dtype {x.dtype} but the model's inducing points are {Z.dtype}.")
    return x.to(Z.device)


def variational_functional_posterior(
    model: ApproximateGP, functional: Functional, x: Tensor, order: int = DEFAULT_ORDER
):
    r"""The variational posterior :math:`q(\mathcal L f(\mathbf x))` of a gradient / IG functional of a variational GP.

    :param model: An ``ApproximateGP`` in eval mode whose ``variational_strategy`` is a ``VariationalStrategy``
        (or ``LargeBatchVariationalStrategy``), an ``UnwhitenedVariationalStrategy``, or an
        ``IndependentMultitaskVariationalStrategy`` around one of them, and whose prior is
        ``MultivariateNormal(mean_module(x), covar_module(x))``.
    :param functional: :class:`~gpytorch_explain.attribution.GradientFunctional` or
        :class:`~gpytorch_explain.attribution.IntegratedGradientFunctional`.
    :param x: Points ``(m, D)`` (or ``(*batch, m, D)``), the inducing points' dtype.
    :param order: Gauss–Legendre order for kernels without closed forms.
    :return: An :class:`~gpytorch_explain.attribution.AttributionDistribution` with mean ``(*batch, m, D)`` and a
        lazy interleaved covariance, exactly the ExactGP contract. The batch shape is that of GPyTorch's own
        predictive (inducing points, q(u), kernel and ``x`` broadcast); for an
        ``IndependentMultitaskVariationalStrategy`` the independent tasks are the base strategy's batch dimension
        ``task_dim`` (mean ``(num_tasks, m, D)`` for the usual single batch dimension), with no cross-task
        covariance (the tasks are independent). For an ``LMCVariationalStrategy`` (outputs
        :math:`f_t = \sum_q a_{qt} g_q`) the batch is the tasks too, mean ``(num_tasks, m, D)``, each task's exact
        marginal posterior (see :class:`~gpytorch_explain.attribution.LMCConditioning`; the cross-task covariances are
        in :func:`~gpytorch_explain.attribution.lmc.lmc_joint_functional_posterior`).
    """
    conditioning = variational_conditioning(model)
    x = _check_points(x, conditioning.inducing_points)
    return conditioning.functional_posterior(functional, x, order=order)
