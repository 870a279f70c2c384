#!/usr/bin/env python3
r"""The shared machinery of attribution GPs: the posterior of a linear functional of a trained model's latent.

:class:`_FunctionalPosterior` inspects the model (exact GP, GPX model, SGPR, variational), conditions the derived
covariances of :mod:`gpytorch_explain.attribution.derived` on the training data and returns an
:class:`~gpytorch_explain.attribution.AttributionDistribution`; the public subclasses (``PosteriorGradient``,
``PosteriorIntegratedGradients``) are in :mod:`gpytorch_explain.attribution.posterior`.
"""

from __future__ import annotations

import warnings

import gpytorch
import torch
from gpytorch import settings as gsettings
from gpytorch.distributions import MultitaskMultivariateNormal
from gpytorch.kernels import Kernel, LinearKernel, ProductKernel
from gpytorch.models import ApproximateGP, ExactGP
from gpytorch.models.exact_prediction_strategies import DefaultPredictionStrategy
from gpytorch.utils.errors import CachingError
from gpytorch.utils.memoize import add_to_cache, get_from_cache
from linear_operator.operators import DiagLinearOperator
from torch import Tensor

from .. import settings as xsettings
from .._compat import _GaussianLikelihoodBase
from ..errors import ModelStateError
from ..operators import AttributionPosteriorLinearOperator
from ..utils import ensure_prediction_strategy
from ..utils.gp import kernel_diag
from ._quadrature import point_chunks
from .adaptive import AutogradFallbackWarning, adaptive_call
from .adaptive import check_order as _check_order
from .attribution_distribution import AttributionDistribution
from .caches import refresh_prediction_caches, tag_prediction_caches
from .derived import DEFAULT_ORDER, DerivedCovariance, functional_mean, uses_quadrature
from .detection import affine_transforms, fallback_reason
from .fallback import JointPosterior, fallback_posterior
from .functionals import Functional, IntegratedGradientFunctional, check_point_tensor
from .sgpr import (
    contains_inducing_point_kernel,
    is_sgpr_model,
    sgpr_functional_posterior,
    sgpr_model_parts,
)
from .variational import variational_functional_posterior, variational_inducing_points, variational_model_parts

__all__: list[str] = []


class _GPXSmoothKernel(ProductKernel):
    """Covariance of the smooth part g(x)ᵀx of a GPX latent: the base kernel times xᵀx' (evaluated densely)."""

    #: the derivative code treats it as the ProductKernel it equals (closed forms per factor, not autograd)
    _explain_role = ProductKernel

    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, **params) -> Tensor:
        res = None
        for kern in self.kernels:
            part = kernel_diag(kern, x1, x2, **params) if diag else kern(x1, x2, **params)
            part = part if torch.is_tensor(part) else part.to_dense()
            res = part if res is None else res * part
        return res


def _reject_inducing_point_kernel(kernel: Kernel, where: str) -> None:
    if contains_inducing_point_kernel(kernel):
        raise NotImplementedError(
            f"An InducingPointKernel inside {where} is not supported: attribution GPs handle SGPR only as an "
            "ExactGP whose covar_module is the InducingPointKernel itself (its base kernel may be any supported "
            "kernel, e.g. ScaleKernel(RBFKernel()))."
        )


def _check_dense_memory(n: int, covar) -> None:
    """Raise ``MemoryError`` with the estimate and the alternatives when a dense ``n × n`` factor cannot fit."""
    from .fallback import available_memory  # looked up per call (tests patch it)

    need = 3 * n * n * covar.dtype.itemsize
    free = available_memory(covar.device)
    if free is not None and need > 0.8 * free:
        raise MemoryError(
            f"Attribution GPs factor the {n} x {n} training covariance densely (about {need / 2**30:.1f} GiB), more "
            f"than the {free / 2**30:.1f} GiB free on {covar.device}. Lower "
            "gpytorch_explain.settings.max_cholesky_size below n (CG / LOVE under gpytorch.settings.fast_pred_var()), "
            "or use an SGPR (InducingPointKernel) or "
            "variational model."
        )


def _gpx_model_parts(model) -> tuple[Kernel, gpytorch.means.Mean | None, int]:
    r"""The smooth latent of a :class:`~gpytorch_explain.GPXModel` with :math:`\mathbf z = \mathbf x`, in raw units.

    The model's latent is :math:`f(\mathbf x) = m(\mathbf x) + \mathbf g(\mathbf x)^\top(\mathbf c\odot\mathbf x)
    + \boldsymbol\epsilon_w^\top(\mathbf c\odot\mathbf x)`, with :math:`\mathbf c` the kernel's
    ``feature_scale`` (``standardize_x``/``standardize_y``; :math:`\mathbf c = \mathbf 1` without them) and
    :math:`m` the mean module (zero, or the constant of ``standardize_y``/``intercept``). Its base kernel already acts
    on raw :math:`\mathbf x` (``standardize_x`` scales the default kernel's lengthscales, not the inputs), so the
    smooth part is the GP with kernel :math:`k(\mathbf x, \mathbf x')\,\mathbf x^\top\operatorname{diag}(\mathbf
    c^2)\mathbf x'` (an ARD ``LinearKernel`` with variances :math:`c_l^2`), and derivatives and path integrals of it
    are in the units the user sees: :math:`\partial_i f` per raw unit of :math:`x_i`, in units of :math:`y`. The
    weight noise is independent across samples and has no derivative (as without standardisation). A constant mean
    has zero gradient and cancels in integrated gradients (returned as ``None``); any other mean module is
    differentiated like an ``ExactGP``'s.
    """
    from gpytorch.means import ConstantMean, ZeroMean

    from ..means import FixedConstantMean

    covar = model.covar_module
    if covar.z_dims is not None:
        raise NotImplementedError(
            "Attributions of a GPXModel are supported with respect to x when z = x; this model has "
            "separate explanation features z (use model.explain for its local weights)."
        )
    _reject_inducing_point_kernel(covar.base_kernel, "a GPXModel's base kernel")
    scale = covar.feature_scale
    linear = LinearKernel(ard_num_dims=None if scale is None else model.x_dims)
    linear = linear.to(covar.raw_weight_noise)
    linear.variance = 1.0 if scale is None else scale.detach().square().reshape(1, -1).to(covar.raw_weight_noise)
    linear.raw_variance.requires_grad_(False)
    kernel = _GPXSmoothKernel(covar.base_kernel, linear)
    mean = model.mean_module
    if type(mean) in (ZeroMean, ConstantMean, FixedConstantMean):
        mean = None  # constant: no gradient, cancels in IG, already subtracted in alpha = C⁻¹(y - m)
    return kernel, mean, model.x_dims


class _FunctionalPosterior:
    r"""Posterior of a linear functional :math:`\mathcal L f` of a trained ``ExactGP``'s latent :math:`f`."""

    def __init__(self, model: ExactGP, functional: Functional, order: int | None = None, method: str = "auto"):
        if not isinstance(model, ExactGP | ApproximateGP):
            hint = ""
            if hasattr(model, "models") and all(isinstance(m, ExactGP | ApproximateGP) for m in model.models):
                hint = " It is a list of models: attribute each one, e.g. PosteriorGradient(model.models[i])."
            raise TypeError(f"model must be a gpytorch ExactGP (or ApproximateGP), got {type(model).__name__}.{hint}")
        self.model = model
        self.functional = functional
        self.adaptive = order is None
        self.order = DEFAULT_ORDER if order is None else _check_order(order)
        #: the order the last adaptive call used (``order`` itself when not adaptive)
        self.last_order = self.order
        if method not in ("auto", "closed_form", "autograd"):
            raise ValueError(f"method must be 'auto', 'closed_form' or 'autograd', got {method!r}.")
        reason = fallback_reason(model) if method != "autograd" else "method='autograd' was requested"
        if method == "closed_form" and reason is not None:
            raise NotImplementedError(f"The closed forms do not apply to this {type(model).__name__}: {reason}.")
        #: ``"closed_form"`` (mean_module/covar_module differentiated directly) or ``"autograd"`` (the model's own
        #: joint posterior differentiated, see ``gpytorch_explain.attribution.fallback``)
        self.method = "closed_form" if reason is None else "autograd"
        self.fallback_reason = reason
        #: BoTorch's fixed affine transforms (Normalize, Standardize) are undone in closed form (chain rule)
        self._affine = affine_transforms(model) if reason is None else None
        if reason is None:
            self._kernel, self._mean, self._dims = self._model_parts(model)
            self._sgpr = is_sgpr_model(model)
            if self._affine is not None:
                self._joint = JointPosterior(model)  # completeness in the user's units
        else:
            self._kernel, self._mean, self._dims, self._sgpr = None, None, None, False
            self._joint = JointPosterior(model)
            if method == "autograd":
                return
            warnings.warn(
                f"{type(self).__name__}: the closed forms do not apply to this {type(model).__name__} because "
                f"{reason}; using the exact autograd fallback on the model's own joint posterior "
                "(method='autograd'; slower, O(m·D) backward passes).",
                AutogradFallbackWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ model inspection
    @staticmethod
    def _model_parts(model) -> tuple[Kernel, gpytorch.means.Mean | None, int]:
        if isinstance(model, ApproximateGP):
            kernel, mean = variational_model_parts(model)
            _reject_inducing_point_kernel(kernel, "an ApproximateGP's covar_module")
            return kernel, mean, None
        if not isinstance(model, ExactGP):
            raise TypeError(f"model must be a gpytorch ExactGP, got {type(model).__name__}.")
        if not isinstance(model.likelihood, _GaussianLikelihoodBase):
            raise NotImplementedError(
                f"Exact attribution GPs need a Gaussian likelihood, got {type(model.likelihood).__name__}."
            )
        from ..models import GPXModel

        if isinstance(model, GPXModel):
            return _gpx_model_parts(model)
        if not hasattr(model, "covar_module") or not isinstance(model.covar_module, Kernel):
            raise NotImplementedError(
                "The model needs a `covar_module` Kernel that defines its prior covariance (as in the "
                "GPyTorch tutorials); custom forward() compositions are not supported."
            )
        if is_sgpr_model(model):  # SGPR: conditioned in inducing space, with the base kernel as the prior
            kernel, mean = sgpr_model_parts(model)
            return kernel, mean, None
        _reject_inducing_point_kernel(model.covar_module, "an ExactGP's covar_module (other than at its top level)")
        return model.covar_module, getattr(model, "mean_module", None), None

    def _train_inputs(self) -> Tensor:
        model = self.model
        if isinstance(model, ApproximateGP):  # the inducing points stand in for the training inputs
            return variational_inducing_points(model, check_structure=getattr(self, "method", None) != "autograd")
        if model.train_inputs is None or model.train_targets is None:
            raise ModelStateError("Attributions need a model with training data; this one has none.")
        if len(model.train_inputs) != 1:
            raise NotImplementedError("Models with several input tensors are not supported.")
        X = model.train_inputs[0]
        if X.dim() == 1:
            X = X.unsqueeze(-1)
        return X

    def _raw_train_inputs(self) -> Tensor | None:
        """Training inputs in the units the user passes (BoTorch models keep them input-transformed in eval mode)."""
        model = self.model
        if getattr(model, "input_transform", None) is not None:
            X = getattr(model, "_original_train_inputs", None)
            if X is None and not getattr(model, "_has_transformed_inputs", False):
                X = model.train_inputs[0] if model.train_inputs else None
            if X is None:
                try:
                    X = model.input_transform.untransform(self._train_inputs())
                except (NotImplementedError, AttributeError, RuntimeError):
                    return None
            return X.unsqueeze(-1) if X.dim() == 1 else X
        return self._train_inputs()

    @property
    def num_features(self) -> int:
        if self._dims is not None:
            return self._dims
        if self.method == "autograd":
            X = self._raw_train_inputs()
            if X is None:
                raise NotImplementedError(
                    "The model's input transform cannot be inverted, so the raw input dimension is unknown."
                )
            return X.size(-1)
        return self._train_inputs().size(-1)

    # ------------------------------------------------------------------ conditioning
    def _strategy(self):
        model = self.model
        if model.training:
            raise ModelStateError("Attributions need the model in eval mode: call model.eval() first.")
        self._train_inputs()  # raises when there is no training data
        from ..models import GPXModel

        if isinstance(model, GPXModel):
            return model._build_prediction_strategy()
        return ensure_prediction_strategy(model)

    def _refresh_caches(self) -> None:
        refresh_prediction_caches(self.model)

    def _tag_caches(self) -> None:
        tag_prediction_caches(self.model)

    def _alpha(self, strategy) -> Tensor:
        r""":math:`\boldsymbol\alpha = \mathbf C^{-1}(\mathbf y - \mathbf m(\mathbf X))` in data space."""
        from ..models import GPXPredictionStrategy

        if type(strategy) is DefaultPredictionStrategy and self._cholesky_size(strategy):
            cached = getattr(strategy, "_gpytorch_explain_chol_alpha", None)
            if cached is None:
                L, _ = self._factor(strategy)
                mvn = strategy.train_prior_dist
                offset = (strategy.train_labels - mvn.loc).unsqueeze(-1)
                if gsettings.detach_test_caches.on():
                    offset = offset.detach()
                cached = torch.cholesky_solve(offset.to(L), L).squeeze(-1)
                if not cached.requires_grad:  # a graph must not be reused across backward passes
                    strategy._gpytorch_explain_chol_alpha = cached
            return cached
        if type(strategy) in (DefaultPredictionStrategy, GPXPredictionStrategy):
            # the same solve (and tolerance) as the model's own predictions
            with gsettings.cg_tolerance(gsettings.eval_cg_tolerance.value()):
                return strategy.mean_cache
        # strategies whose mean cache lives elsewhere (feature, grid or inducing space): solve once
        # with the strategy's own training covariance and keep it in the strategy's GPyTorch memo cache
        # (gpytorch.utils.memoize, the cache its own @cached properties use)
        try:
            return get_from_cache(strategy, "gpytorch_explain_data_space_alpha")
        except CachingError:
            pass
        mvn = strategy.likelihood(strategy.train_prior_dist, strategy.train_inputs)
        offset = (strategy.train_labels - mvn.loc).unsqueeze(-1)
        with gsettings.cg_tolerance(gsettings.eval_cg_tolerance.value()):
            alpha = mvn.lazy_covariance_matrix.evaluate_kernel().solve(offset).squeeze(-1)
        if gsettings.detach_test_caches.on():
            alpha = alpha.detach()
        return add_to_cache(strategy, "gpytorch_explain_data_space_alpha", alpha)

    def _weight_space_point(self, strategy) -> Tensor | None:
        r"""For a bare ``LinearKernel`` :math:`k = v\,\mathbf x^\top\mathbf x'` (GPyTorch's
        ``LinearPredictionStrategy``): the one pseudo training point :math:`\mathbf X^\top\boldsymbol\alpha`
        ``(*batch, 1, d)``, else ``None``.

        Every derived cross-covariance of a linear kernel is linear in its second argument, so the mean
        :math:`\sum_j \alpha_j\,\mathcal L\,k(\cdot, \mathbf X_j)` of any functional :math:`\mathcal L` is
        :math:`\mathcal L\,k(\cdot, \mathbf X^\top\boldsymbol\alpha)`. GPyTorch keeps
        :math:`\Phi^\top\boldsymbol\alpha` (:math:`\Phi = \sqrt v\,\mathbf X`) as its mean cache, solved in
        weight space; the data-space sum cancels: with float32, rank 3 and noise 0.01 it was 2.3e-4 off in relative
        terms, the model's own mean 6e-7.
        """
        from gpytorch.models.exact_prediction_strategies import LinearPredictionStrategy

        if type(strategy) is not LinearPredictionStrategy or type(self._kernel) is not LinearKernel:
            return None
        if self._dims is not None or self._kernel.active_dims is not None:
            return None
        w = strategy.mean_cache  # (*batch, d, 1)
        point = (w / self._kernel.variance.sqrt()).mT
        return point.detach() if gsettings.detach_test_caches.on() else point

    def _factor(self, strategy):
        from ..models import GPXPredictionStrategy

        covar = strategy.lik_train_train_covar
        if gsettings.detach_test_caches.on():
            covar = covar.detach()
        if isinstance(strategy, GPXPredictionStrategy):
            if strategy.uses_cholesky:
                return strategy.train_cholesky(), "cholesky"
        elif self._cholesky_size(strategy):
            cached = getattr(strategy, "_gpytorch_explain_cholesky", None)
            if cached is None:
                _check_dense_memory(strategy.num_train, covar)
                cached = covar.cholesky().to_dense()
                if not cached.requires_grad:
                    strategy._gpytorch_explain_cholesky = cached
            return cached, "cholesky"
        if gsettings.fast_pred_var.on():
            if type(strategy) in (DefaultPredictionStrategy, GPXPredictionStrategy):
                root = strategy.covar_cache
            else:
                root = covar.root_inv_decomposition().root
            return root.to_dense() if hasattr(root, "to_dense") else root, "root"
        if not getattr(self, "_warned_cg", False):
            self._warned_cg = True
            n = strategy.num_train
            warnings.warn(
                f"{type(self).__name__}: n = {n} training points is above max_cholesky_size "
                f"({max(gsettings.max_cholesky_size.value(), xsettings.max_cholesky_size.value())}), so the "
                f"attribution covariances use CG with D right-hand sides per point (memory about "
                f"{8 * n * 64 * covar.dtype.itemsize / 2**30:.2f} GiB per 64 right-hand sides, time growing with "
                f"the number of points). Alternatives: gpytorch.settings.fast_pred_var() (LOVE), a larger "
                f"gpytorch_explain.settings.max_cholesky_size if {n}² entries "
                f"({3 * n * n * covar.dtype.itemsize / 2**30:.1f} GiB) fit in memory, or an SGPR / variational model.",
                stacklevel=4,
            )
        return covar.evaluate_kernel(), "solve"

    @staticmethod
    def _cholesky_size(strategy) -> bool:
        """Whether the training covariance is factored densely: ``n`` up to the larger of GPyTorch's and
        :class:`gpytorch_explain.settings.max_cholesky_size` (5000 by default; one Cholesky beats CG with ``m·D``
        right-hand sides by far)."""
        limit = max(gsettings.max_cholesky_size.value(), xsettings.max_cholesky_size.value())
        return strategy.num_train <= limit

    # ------------------------------------------------------------------ inputs
    def _check_x(self, x) -> Tensor:
        check_point_tensor(x)
        if x.dtype in (torch.float16, torch.bfloat16):
            raise TypeError(
                f"x has dtype {x.dtype}: attribution GPs need float32 or float64 (Cholesky factors and derived "
                "covariances lose all accuracy in half precision). Convert the model and x with .float() or .double()."
            )
        if x.size(-2) == 0:
            raise ValueError(f"x has no points (shape {tuple(x.shape)}).")
        D = self.num_features
        if x.size(-1) != D:
            raise ValueError(f"x has {x.size(-1)} columns but the model's inputs have D = {D}.")
        if not torch.isfinite(x).all():
            raise ValueError("x contains NaN or infinite values.")
        X = self._train_inputs()
        if x.dtype != X.dtype:
            raise TypeError(f"x has dtype {x.dtype} but the model's training inputs are {X.dtype}.")
        if self.method == "autograd" and x.dim() != 2:
            raise NotImplementedError(
                f"The autograd fallback takes x of shape (m, D), got {tuple(x.shape)}; call it per batch entry."
            )
        return x.to(X.device)

    # ------------------------------------------------------------------ the posterior
    def __call__(self, x: Tensor) -> MultitaskMultivariateNormal:
        r"""The attribution GP at ``x`` (``(m, D)`` or ``(*batch, m, D)``).

        For an ``ExactGP`` the derived cross-covariance :math:`\mathbf B` (``m × D × n``) is formed at once only
        when it has at most :class:`~gpytorch_explain.settings.max_block_elements` elements. Otherwise the mean
        :math:`\mathbf B^\top\boldsymbol\alpha` is accumulated over chunks of points and the covariance
        operator recomputes the rows of :math:`\mathbf B` chunk by chunk when it needs them (memory
        :math:`O(\text{chunk}\cdot Dn)`; the results are the same up to round-off). SGPR models condition
        in inducing space (:mod:`~gpytorch_explain.attribution.sgpr`) and variational models on
        :math:`q(\mathbf u)`, where :math:`\mathbf B` is only ``m × D × M``.
        """
        x = self._check_x(x)
        if self.model.training:
            raise ModelStateError("Attributions need the model in eval mode: call model.eval() first.")
        self._refresh_caches()
        if self.method == "autograd":
            fn = self._autograd_call
        else:
            fn = self._closed_call
        quadrature = isinstance(self.functional, IntegratedGradientFunctional) and (
            self.method == "autograd" or uses_quadrature(self._kernel, self._mean)
        )
        if not (self.adaptive and quadrature):
            out = fn(x, self.order)
            self.last_order = self.order
        else:
            out, self.last_order = adaptive_call(fn, x, self.order, where=type(self).__name__)
        self._tag_caches()
        out.method = self.method
        out.quadrature_order = self.last_order if quadrature else None
        return out

    def _autograd_call(self, x: Tensor, order: int) -> AttributionDistribution:

        return fallback_posterior(self, x, order)

    def _closed_call(self, x: Tensor, order: int) -> AttributionDistribution:
        if self._affine is None:
            return self._closed_call_raw(x, order)
        coef, offset, ystd = self._affine
        raw_functional = self.functional
        if isinstance(raw_functional, IntegratedGradientFunctional):
            self.functional = IntegratedGradientFunctional((raw_functional.baselines - offset) / coef)
            scale = ystd.expand(x.size(-1))
        else:
            scale = ystd / coef
        try:
            out = self._closed_call_raw((x - offset) / coef, order)
        finally:
            self.functional = raw_functional
        s = scale.repeat(x.size(-2))
        covar = DiagLinearOperator(s) @ out.lazy_covariance_matrix @ DiagLinearOperator(s)
        return AttributionDistribution(out.mean * scale, covar, interleaved=True)

    def _closed_call_raw(self, x: Tensor, order: int) -> AttributionDistribution:
        if isinstance(self.model, ApproximateGP):
            return variational_functional_posterior(self.model, self.functional, x, order=order)
        if self._sgpr:
            return sgpr_functional_posterior(self.model, self.functional, x, order=order)
        strategy = self._strategy()
        X = self._train_inputs()
        if self._dims is not None:  # GPX with z = x: the kernel input is x itself
            X = self.model.covar_module.split_inputs(X)[0]
        alpha = self._alpha(strategy)
        factor, factor_type = self._factor(strategy)
        if gsettings.detach_test_caches.on():
            X, alpha = X.detach(), alpha.detach()
        derived = DerivedCovariance(self._kernel, self.functional, order=order)
        chunks = point_chunks(x, X)
        weight_point = self._weight_space_point(strategy)
        if weight_point is not None:  # a bare LinearKernel: the mean from GPyTorch's weight-space cache
            rows = derived.cross(x, weight_point)  # (*batch, m, D, 1)
            mean = rows.squeeze(-1)
            covar = AttributionPosteriorLinearOperator(
                x, X, factor, factor_type=factor_type, derived=derived, lazy_rows=True
            )
        elif len(chunks) <= 1:  # everything at once
            rows = derived.cross(x, X)  # (*batch, m, D, n)
            mean = (rows @ alpha.unsqueeze(-1).unsqueeze(-3)).squeeze(-1)
            covar = AttributionPosteriorLinearOperator(x, rows, factor, factor_type=factor_type, derived=derived)
        else:  # bounded memory: B is never held whole
            parts = [
                (derived.cross(x[..., points, :], X) @ alpha.unsqueeze(-1).unsqueeze(-3)).squeeze(-1)
                for points in chunks
            ]
            mean = torch.cat(parts, dim=-2)
            covar = AttributionPosteriorLinearOperator(
                x, X, factor, factor_type=factor_type, derived=derived, lazy_rows=True
            )
        if self._mean is not None:
            mean = mean + functional_mean(self._mean, self.functional, x, order=order)
        return AttributionDistribution(mean, covar, interleaved=True)

    def quadrature_error(self, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""Estimated quadrature error of the means and variances at ``x``, each ``(m, D)``.

        The absolute difference between the results at ``order`` and at ``order // 2``
        Gauss–Legendre nodes (an indicator, not a bound: it is large when the lower order has not
        converged and at round-off level when both have). Zero for the closed-form kernels.
        """
        import copy

        with torch.no_grad():
            fine_post = self(x)
        fine = copy.copy(self)
        fine.adaptive = False
        fine.order = self.last_order
        coarse = copy.copy(fine)
        coarse.order = max(2, fine.order // 2)
        with torch.no_grad():
            coarse_post = coarse(x)
            mean_err = (fine_post.mean - coarse_post.mean).abs()
            var_err = (fine_post.variance - coarse_post.variance).abs()
        return mean_err, var_err
