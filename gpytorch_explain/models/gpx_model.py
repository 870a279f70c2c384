#!/usr/bin/env python3
r"""GPX: Gaussian process regression with local explanation, as a GPyTorch ``ExactGP``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gpytorch
import torch
from gpytorch import settings as gsettings
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.kernels import InducingPointKernel, Kernel, RBFKernel, ScaleKernel
from gpytorch.lazy import LazyEvaluatedKernelTensor
from gpytorch.likelihoods import GaussianLikelihood, Likelihood
from gpytorch.means import ConstantMean, ZeroMean
from torch import Tensor

from .. import settings as explain_settings
from ..errors import ModelStateError
from ..explanation import GPXExplanation
from ..fit import fit_gpx_model
from ..kernels import GPXKernel
from ..kernels.ski_features import cover_grid, fit_grid, supports_grid_features
from ..means import FixedConstantMean
from ..operators import (
    FeatureScaledLinearOperator,
)
from ..utils import (
    check_feature_names,
    check_matrix,
    check_same_rows,
    check_vector,
    ensure_prediction_strategy,
    median_heuristic_lengthscale,
)
from .gpx_botorch import gpx_posterior
from .gpx_checks import check_base_kernel_dims, check_dense_memory, column_scale, is_lean_kernel, warn_scale
from .gpx_prediction_strategy import GPXPredictionStrategy
from .gpx_weight_posterior import latent_in_feature_space, weight_posterior

__all__ = ["GPXModel", "GPXPredictionStrategy"]


class GPXModel(gpytorch.models.ExactGP):
    r"""GP regression with local explanation (GPX; Yoshikawa & Iwata), a drop-in ``ExactGP``.

    Each sample is explained by a local linear model whose weights are Gaussian processes:

    .. math::

        y_i = \mathbf w_i^\top \mathbf z_i + \epsilon_y, \qquad
        \mathbf w_i = \mathbf g(\mathbf x_i) + \boldsymbol\epsilon_w, \qquad
        g_l \sim \mathcal{GP}(0, k), \quad
        \epsilon_y \sim \mathcal N(0, \sigma_y^2), \
        \boldsymbol\epsilon_w \sim \mathcal N(\mathbf 0, \sigma_w^2\mathbf I_d),

    so that :math:`\mathbf y \sim \mathcal N(\mathbf m, \mathbf C)` (:math:`\mathbf m = \mathbf 0` unless
    ``standardize_y`` or ``intercept`` gives a constant mean) with
    :math:`\mathbf C = \sigma_y^2 \mathbf I + (\mathbf K + \sigma_w^2 \mathbf I) \odot \mathbf Z \mathbf Z^\top`.
    :math:`\mathbf x` are the inputs of the kernel, :math:`\mathbf z` the (human-readable)
    explanation features; by default :math:`\mathbf z = \mathbf x`.

    Train it like any ``ExactGP`` (``model(train_x, train_z)`` with
    ``ExactMarginalLogLikelihood``) or with :meth:`fit`. In eval mode:

    * ``model(x, z)`` is the latent :math:`f_* = \mathbf w_*^\top \mathbf z_*` (a
      ``MultivariateNormal``; includes :math:`\sigma_w^2\|\mathbf z_*\|^2`, excludes :math:`\sigma_y^2`);
      ``model.likelihood(model(x, z))`` is the predictive distribution of :math:`y_*`;
    * :meth:`predict_weights` is the joint posterior of :math:`\mathbf w_*`;
    * :meth:`explain` bundles predictions, weights and contributions :math:`\mathbf w_* \odot \mathbf z_*`.

    :param train_x: :math:`\mathbf X`, ``(n, D)``.
    :param train_y: :math:`\mathbf y`, ``(n,)``.
    :param train_z: :math:`\mathbf Z`, ``(n, d)``; ``None`` means :math:`\mathbf Z = \mathbf X`.
    :param likelihood: A ``GaussianLikelihood`` (default: one with :math:`\sigma_y^2 = 0.01`).
    :param base_kernel: :math:`k` on :math:`\mathbf x` (default: ``ScaleKernel(RBFKernel())`` with
        outputscale 1 and the lengthscale from the median heuristic). Any GPyTorch kernel works. With an
        ``InducingPointKernel`` (SGPR) or a KISS-GP kernel (``GridInterpolationKernel``, also in
        ``ScaleKernel``, ``AdditiveStructureKernel`` or ``ProductStructureKernel``), training,
        :meth:`predict_weights` and ``model(x, z)`` run in feature space (exact Woodbury, no
        :math:`n \times n` or :math:`m \times n` matrix), which is the path for
        :math:`10^5`-:math:`10^6` rows; see ``gpytorch_explain.kernels.grid_features``.
    :param feature_names: Optional names of the :math:`d` explanation features (default ``x0, x1, ...`` when
        :math:`\mathbf z = \mathbf x`, ``z0, z1, ...`` otherwise).
    :param standardize_x: Work with unit-scale columns (default ``False``): the explanation features enter the
        kernel as :math:`\tilde z_l = c_l z_l` (see ``standardize_y`` for :math:`c_l`), and the default kernel gets
        ARD lengthscales :math:`\ell_j = \ell\, s_{x,j}` (the median heuristic on the standardised columns),
        which is the same model as one on :math:`x_j / s_{x,j}`. A kernel you pass keeps its own lengthscales.
    :param standardize_y: Model :math:`y = \bar y + s_y \tilde y` (default ``False``): a fixed constant mean
        :math:`\bar y` (:class:`~gpytorch_explain.means.FixedConstantMean`, the part of each prediction the
        weights do not explain), weight priors scaled by :math:`s_y`, and a default noise of
        :math:`0.01 s_y^2`. With both options :math:`c_l = s_y / s_{z,l}`; with ``standardize_x`` only
        :math:`c_l = 1/s_{z,l}`; with ``standardize_y`` only :math:`c_l = s_y`. Column stds :math:`s` are the
        training data's (1 for a constant column) and stay fixed (``set_train_data`` keeps them); they live in
        the state dict (``covar_module.feature_scale``, ``mean_module.constant``).

        The kernel's hyperparameters (output scale, :math:`\sigma_w^2`) are then those of the standardised
        model, while the data, ``model(x, z)``, the likelihood, :meth:`predict_weights`, :meth:`explain` and
        :meth:`posterior` are all in raw units (and so are the attribution GPs of
        :mod:`gpytorch_explain.attribution` when :math:`\mathbf z = \mathbf x`): the weight of raw feature :math:`l` is
        :math:`w_l = c_l \tilde w_l`, with covariance :math:`\mathbf S\tilde{\boldsymbol\Sigma}\mathbf S`,
        :math:`\mathbf S = \operatorname{diag}(\mathbf c)`, and the contributions
        :math:`w_l z_l = \tilde w_l \tilde z_l` satisfy
        :math:`\sum_l w_l z_l = \mathbb E[f_*] - m(\mathbf x_*)` with :math:`m` the mean module
        (:attr:`intercept`). Contributions stay relative to :math:`\mathbf z = \mathbf 0` (the features
        are scaled, not centred).
    :param intercept: Learn a constant mean :math:`m` (GPyTorch's ``ConstantMean``, initialised at
        :math:`\bar y`), an intercept that the weights do not explain (default ``False``: zero mean, or
        :math:`\bar y` with ``standardize_y``). For an intercept that varies with :math:`\mathbf x` and is
        explained, add a column of ones to :math:`\mathbf z` instead.

    Without standardisation, the constructor warns when columns of :math:`\mathbf x`/:math:`\mathbf z` or
    :math:`\mathbf y` are far from unit scale (:class:`gpytorch_explain.settings.scale_warning_range`): on
    :math:`y \approx 150 + ` signal (std 18.5) the zero-mean model had test RMSE 16.4, and 0.73 with
    ``standardize_y=True`` (noise std 1). float64 is recommended (float32 is accepted; float16/bfloat16 are not).

    Example:
        >>> import torch
        >>> from gpytorch_explain import GPXModel
        >>> x = torch.randn(40, 3, dtype=torch.float64)
        >>> y = x[:, 0] * torch.sin(x[:, 1])
        >>> model = GPXModel(x, y).fit(max_iter=20)
        >>> weights = model.predict_weights(x[:5])
        >>> weights.mean.shape, weights.covariance_matrix.shape
        (torch.Size([5, 3]), torch.Size([15, 15]))
    """

    def __init__(
        self,
        train_x: Tensor,
        train_y: Tensor,
        train_z: Tensor | None = None,
        likelihood: Likelihood | None = None,
        base_kernel: Kernel | None = None,
        feature_names: Sequence[str] | None = None,
        standardize_x: bool = False,
        standardize_y: bool = False,
        intercept: bool = False,
    ):
        train_x, train_y, train_z = self._check_data(train_x, train_y, train_z)
        if likelihood is None:
            # created in the data's dtype before the values are set (else float64 models start at float32-rounded
            # values, e.g. a noise of 0.010000002)
            likelihood = GaussianLikelihood().to(dtype=train_x.dtype, device=train_x.device)
            y_var = train_y.var().item() if standardize_y and train_y.numel() > 1 else 1.0
            likelihood.noise = torch.tensor(0.01 * (y_var if y_var > 0 else 1.0), dtype=train_x.dtype)
        elif not isinstance(likelihood, GaussianLikelihood):
            raise TypeError(f"GPXModel needs a GaussianLikelihood (exact inference), got {type(likelihood).__name__}.")
        likelihood = likelihood.to(dtype=train_x.dtype, device=train_x.device)
        warn_scale(train_x, train_z, train_y, standardize_x, standardize_y)

        x_dims = train_x.size(-1)
        z_dims = None if train_z is None else train_z.size(-1)
        train_inputs = train_x if train_z is None else torch.cat([train_x, train_z], dim=-1)
        super().__init__(train_inputs, train_y, likelihood)

        x_scale = column_scale(train_x.detach()) if standardize_x else torch.ones_like(train_x[0])
        if base_kernel is None:
            base_kernel = ScaleKernel(RBFKernel(ard_num_dims=x_dims if standardize_x else None))
            base_kernel = base_kernel.to(dtype=train_x.dtype, device=train_x.device)
            base_kernel.outputscale = 1.0
            if train_x.size(0) >= 2:
                lengthscale = median_heuristic_lengthscale(train_x.detach() / x_scale)
                base_kernel.base_kernel.lengthscale = lengthscale * x_scale if standardize_x else lengthscale
        elif not isinstance(base_kernel, Kernel):
            raise TypeError(f"base_kernel must be a gpytorch Kernel, got {type(base_kernel).__name__}.")
        check_base_kernel_dims(base_kernel, x_dims)
        if isinstance(base_kernel, InducingPointKernel) and base_kernel.likelihood is not likelihood:
            # the SGPR trace term needs the model's own noise
            base_kernel.likelihood = likelihood
        y_mean = train_y.detach().mean() if train_y.numel() else torch.zeros((), dtype=train_y.dtype)
        if intercept:
            self.mean_module = ConstantMean()
            self.mean_module.constant = y_mean
        elif standardize_y:
            self.mean_module = FixedConstantMean(y_mean)
        else:
            self.mean_module = ZeroMean()
        self.covar_module = GPXKernel(base_kernel, x_dims=x_dims, z_dims=z_dims)
        self.covar_module.to(dtype=train_x.dtype, device=train_x.device)
        self.covar_module.weight_noise = 0.01
        self.to(dtype=train_x.dtype, device=train_x.device)  # before the scale buffer: kept in the data's dtype
        if standardize_x or standardize_y:
            z_scale = column_scale((train_x if train_z is None else train_z).detach()) if standardize_x else 1.0
            y_scale = column_scale(train_y.detach().unsqueeze(-1))[0] if standardize_y else 1.0
            num = x_dims if z_dims is None else z_dims
            self.covar_module.set_feature_scale(torch.ones(num, dtype=train_x.dtype) * y_scale / z_scale)
        fit_grid(base_kernel, train_x)  # a dynamic KISS-GP grid covers the training inputs from the start

        num_features = x_dims if z_dims is None else z_dims
        default_names = [f"{'x' if z_dims is None else 'z'}{l}" for l in range(num_features)]
        self.feature_names = check_feature_names(feature_names, num_features) or default_names
        self.z_from_x: Callable[[Tensor], Tensor] | None = None
        self._cache_snapshot: list[Tensor] | None = None

    @staticmethod
    def _check_data(train_x, train_y, train_z) -> tuple[Tensor, Tensor, Tensor | None]:
        """The constructor's checks of the training data (also run by :meth:`set_train_data`)."""
        train_x = check_matrix("train_x", train_x)
        train_y = check_vector("train_y", train_y)
        if train_z is not None:
            train_z = check_matrix("train_z", train_z)
        check_same_rows(train_x=train_x, train_y=train_y, train_z=train_z)
        if train_x.size(0) == 0:
            raise ValueError("GPXModel needs at least one training sample; train_x has 0 rows.")
        dtypes = {t.dtype for t in (train_x, train_y, train_z) if t is not None}
        if len(dtypes) > 1:
            raise TypeError(f"train_x, train_y and train_z must share one dtype, got {sorted(map(str, dtypes))}.")
        return train_x, train_y, train_z

    def set_train_data(self, inputs=None, targets=None, strict: bool = True) -> None:
        """``ExactGP.set_train_data`` with the constructor's checks (finite floating-point data, matching rows,
        one dtype; inputs are rows ``[x | z]``, or ``x`` when z = x). A dynamic KISS-GP grid is refitted to the new
        training inputs. Standardisation statistics stay those of the constructor's data."""
        if inputs is not None or targets is not None:
            new_inputs = self.train_inputs[0] if inputs is None else inputs
            if isinstance(new_inputs, (tuple, list)):
                if len(new_inputs) != 1:
                    raise ValueError(f"GPXModel takes one input tensor, got {len(new_inputs)}.")
                new_inputs = new_inputs[0]
            new_targets = self.train_targets if targets is None else targets
            cols = self.covar_module.input_dims
            new_inputs = check_matrix("inputs", new_inputs, cols=cols, cols_name="columns ([x | z] or x when z = x)")
            self._check_data(new_inputs, new_targets, None)
            if new_inputs.dtype != self._param_dtype():
                raise TypeError(
                    f"The training data has dtype {new_inputs.dtype} but the model is {self._param_dtype()}."
                )
        super().set_train_data(inputs, targets, strict)
        if inputs is not None and supports_grid_features(self.covar_module.base_kernel):
            fit_grid(self.covar_module.base_kernel, self._train_xz()[0])

    # ----------------------------------------------------------------- properties
    @property
    def x_dims(self) -> int:
        """:math:`D`, the number of columns of :math:`\\mathbf x`."""
        return self.covar_module.x_dims

    @property
    def num_features(self) -> int:
        """:math:`d`, the number of explanation features (columns of :math:`\\mathbf z`)."""
        return self.covar_module.x_dims if self.covar_module.z_dims is None else self.covar_module.z_dims

    @property
    def weight_noise(self) -> Tensor:
        r""":math:`\sigma_w^2`, the variance of the weight noise."""
        return self.covar_module.weight_noise

    @weight_noise.setter
    def weight_noise(self, value: Tensor | float) -> None:
        self.covar_module.weight_noise = value
        self.prediction_strategy = None

    @property
    def base_kernel(self) -> Kernel:
        """The kernel :math:`k` on :math:`\\mathbf x`."""
        return self.covar_module.base_kernel

    def _train_xz(self) -> tuple[Tensor, Tensor]:
        if self.train_inputs is None:
            raise ModelStateError("This GPXModel has no training data; call set_train_data first.")
        return self.covar_module.split_inputs(self.train_inputs[0])

    # ----------------------------------------------------------------- inputs
    def _param_dtype(self) -> torch.dtype:
        return self.covar_module.raw_weight_noise.dtype

    def _check_x(self, x: Tensor, name: str = "x") -> Tensor:
        x = check_matrix(name, x, cols=self.x_dims, cols_name=f"columns (the model's x has D = {self.x_dims})")
        if x.dtype != self._param_dtype():
            raise TypeError(f"{name} has dtype {x.dtype} but the model is {self._param_dtype()}.")
        return x

    def _make_inputs(self, x: Tensor, z: Tensor | None) -> Tensor:
        """Build the kernel input ``[x | z]`` (or ``x`` when z = x), validating shapes."""
        if not torch.is_tensor(x):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}.")
        if self.covar_module.z_dims is None:
            if z is not None:
                raise ValueError("This model was built with z = x (no train_z); do not pass z.")
            return self._check_x(x)
        if z is None:
            # already-joined inputs, e.g. model(*model.train_inputs) as BoTorch does
            if x.dim() == 2 and x.size(-1) == self.covar_module.input_dims:
                check_matrix("x", x)
                if x.dtype != self._param_dtype():
                    raise TypeError(f"x has dtype {x.dtype} but the model is {self._param_dtype()}.")
                return x
            raise ValueError(
                f"This model explains with separate features z (d = {self.num_features}); call model(x, z)."
            )
        x = self._check_x(x)
        z_cols = f"columns (the model's z has d = {self.num_features})"
        z = check_matrix("z", z, cols=self.num_features, cols_name=z_cols)
        if z.dtype != x.dtype:
            raise TypeError(f"x and z must share one dtype, got {x.dtype} and {z.dtype}.")
        check_same_rows(x=x, z=z)
        return torch.cat([x, z], dim=-1)

    # ----------------------------------------------------------------- GPyTorch API
    def forward(self, inputs: Tensor) -> MultivariateNormal:
        return MultivariateNormal(self.mean_module(inputs), self.covar_module(inputs))

    def __call__(self, x: Tensor, z: Tensor | None = None, **kwargs) -> MultivariateNormal:
        inputs = self._make_inputs(x, z)
        if not self.training:
            self._drop_stale_caches()
            self._cover_grid(inputs[..., : self.x_dims])
        if not self.training and self.prediction_strategy is None and self.train_inputs is not None:
            self._build_prediction_strategy()
        if (
            not self.training
            and not kwargs
            and inputs.dim() == 2
            and self.prediction_strategy is not None
            and not gsettings.prior_mode.on()
            and self.prediction_strategy.uses_inducing
            and not self.prediction_strategy.uses_cholesky
        ):
            return self._latent_in_feature_space(inputs)
        return super().__call__(inputs, **kwargs)

    def _latent_in_feature_space(self, inputs: Tensor) -> MultivariateNormal:
        """The latent predictive from the weight posterior (:func:`.gpx_weight_posterior.latent_in_feature_space`)."""
        return latent_in_feature_space(self, inputs)

    def _get_train_prior_distribution(self, train_inputs, **kwargs) -> MultivariateNormal:
        # the training covariance of an inducing-point base is the Nyström one, as in training;
        # GPyTorch's SGPR diagonal correction belongs to test points only
        # (evaluated inside the setting: the lazy kernel tensor would read it when evaluated)
        with gsettings.sgpr_diagonal_correction(False):
            prior = super()._get_train_prior_distribution(train_inputs, **kwargs)
            covar = prior.lazy_covariance_matrix
            if isinstance(covar, LazyEvaluatedKernelTensor):
                prior = MultivariateNormal(prior.mean, covar.evaluate_kernel())
            return prior

    def _cover_grid(self, x: Tensor) -> None:
        """Eval mode, KISS-GP base through grid features: if ``x`` falls outside the grid, refit the grid to span
        the training inputs and ``x``, and drop the prediction caches (they belong to the old grid)."""
        base = self.covar_module.base_kernel
        if self.train_inputs is None or not explain_settings.use_grid_features.on():
            return
        if supports_grid_features(base) and cover_grid(base, self._train_xz()[0], x):
            self.prediction_strategy = None

    def _build_prediction_strategy(self) -> GPXPredictionStrategy:
        self._drop_stale_caches()
        if self.prediction_strategy is None:
            self.check_memory("GPX predictions")
            strategy = ensure_prediction_strategy(self, GPXPredictionStrategy)
            self._cache_snapshot = self._hyperparameter_snapshot()
            return strategy
        return self.prediction_strategy

    def _hyperparameter_snapshot(self) -> list[Tensor]:
        return [t.detach().clone() for t in (*self.parameters(), *self.buffers())]

    def _drop_stale_caches(self) -> None:
        """Drop the prediction caches when a parameter or buffer changed since they were built (in place, through
        ``.data``, ``initialize`` or a setter: compared by value, since ``.data`` writes keep ``_version``)."""
        if self.prediction_strategy is None:
            return
        snapshot = getattr(self, "_cache_snapshot", None)
        current = [*self.parameters(), *self.buffers()]
        if snapshot is None or len(snapshot) != len(current):
            stale = True
        else:
            pairs = zip(snapshot, current, strict=True)
            stale = any(a.shape != b.shape or not torch.equal(a, b.detach()) for a, b in pairs)
        if stale:
            self.prediction_strategy = None
            self._cache_snapshot = None
            for module in self.modules():  # GPyTorch's SGPR kernel keeps K_UU and its root in eval mode
                if isinstance(module, InducingPointKernel):
                    module._clear_cache()

    def check_memory(self, what: str = "GPX", training: bool = False) -> None:
        """Raise ``MemoryError`` (warn above half) when the path over the :math:`n\times n` covariance needs more memory
        than the device has (estimate: ``gpytorch_explain.models.gpx_checks.check_dense_memory``: the dense/CG
        fit, the dense prediction factor, or the kernel matrix CG multiplies); the message names the estimate and the
        alternatives. Inducing-point and grid-feature bases need no :math:`n\times n` matrix and are not checked, nor
        is a memory-lean base (``PartitionedKernel``, KeOps) on its CG path. Off with
        ``gpytorch_explain.settings.check_memory(False)``."""
        base = self.covar_module.base_kernel
        if self.train_inputs is None or isinstance(base, InducingPointKernel):
            return
        if explain_settings.use_grid_features.on() and supports_grid_features(base):
            return
        inputs = self.train_inputs[0]
        batch = inputs.shape[:-2].numel()
        check_dense_memory(inputs.size(-2), inputs.dtype, inputs.device, training, what, is_lean_kernel(base), batch)

    def _check_eval(self, what: str) -> None:
        if self.train_inputs is None or self.train_targets is None:
            raise ModelStateError(f"{what} needs training data; this model has none (see set_train_data).")
        if self.training:
            raise ModelStateError(f"{what} needs the model in eval mode: call model.eval() first.")

    # ----------------------------------------------------------------- weights
    def predict_weights(self, x: Tensor) -> MultitaskMultivariateNormal:
        r"""Joint posterior of the local weights :math:`\mathbf w_*` at test inputs :math:`\mathbf x_*`.

        :math:`\mathbf w_*` depends on :math:`\mathbf x_*` only (not on :math:`\mathbf z_*`). With
        :math:`\boldsymbol\alpha = \mathbf C^{-1}\mathbf y` (GPyTorch's mean cache) and
        :math:`\mathbf B_{i,(p,l)} = k(\mathbf x_p^*, \mathbf x_i) z_{il}`,

        .. math::

            \mathbb E[\mathbf w_*] = \mathbf B^\top \boldsymbol\alpha, \qquad
            \operatorname{Cov}[\mathbf w_*] = (\mathbf K_{**} + \sigma_w^2 \mathbf I) \otimes \mathbf I_d
            - \mathbf B^\top \mathbf C^{-1} \mathbf B .

        The covariance is the true joint over points and features, interleaved (index
        ``point * d + feature``), held lazily as a
        :class:`~gpytorch_explain.operators.WeightPosteriorLinearOperator`: ``.variance`` and
        ``.covariance_matrix.point_blocks()``-style per-point blocks cost :math:`O(mn^2d)` once
        (exact, through a Cholesky factor of :math:`\mathbf C`), and ``.covariance_matrix`` is
        exact. Above the dense limit (see :class:`gpytorch_explain.settings.max_cholesky_size`), the factor is
        kept while it fits :class:`gpytorch_explain.settings.dense_memory_budget`, and exact CG solves replace it
        beyond; ``gpytorch.settings.fast_pred_var()`` replaces it there by GPyTorch's LOVE root of
        :math:`\mathbf C^{-1}` (cost :math:`O(mnrd)` for rank :math:`r`, set by
        ``gpytorch.settings.max_root_decomposition_size``); below the limit the exact factor is used
        either way.

        With ``standardize_x``/``standardize_y`` these are the weights of the raw features,
        :math:`\mathbf w_* = \mathbf c \odot \tilde{\mathbf w}_*` (see the class docstring), with covariance
        :math:`(\mathbf I_m \otimes \mathbf S)\operatorname{Cov}[\tilde{\mathbf w}_*](\mathbf I_m \otimes \mathbf S)`
        (:class:`~gpytorch_explain.operators.FeatureScaledLinearOperator`).

        :param x: Test inputs :math:`\mathbf x_*`, ``(m, D)``.
        :return: ``MultitaskMultivariateNormal`` with mean ``(m, d)``.
        """
        self._check_eval("predict_weights")
        x = self._check_x(x)
        post = self._predict_weights_kernel_units(x)
        scale = self.covar_module.feature_scale
        if scale is None:
            return post
        covar = FeatureScaledLinearOperator(post.lazy_covariance_matrix, scale)
        return MultitaskMultivariateNormal(post.mean * scale, covar, interleaved=True)

    def _predict_weights_kernel_units(self, x: Tensor) -> MultitaskMultivariateNormal:
        r"""The weights of the kernel's features :math:`\tilde{\mathbf z} = \mathbf c \odot \mathbf z`
        (:func:`.gpx_weight_posterior.weight_posterior`)."""
        return weight_posterior(self, x)

    def explain(self, x: Tensor, z: Tensor | None = None) -> GPXExplanation:
        r"""Predictions with per-sample explanations at :math:`(\mathbf x_*, \mathbf z_*)`.

        Returns a :class:`~gpytorch_explain.GPXExplanation` holding the predictive mean and std of
        :math:`y_*`, the latent std of :math:`f_*`, the weight posterior (mean, std, per-point
        :math:`d\times d` covariance) and the contributions
        :math:`\boldsymbol\phi_* = \mathbf w_* \odot \mathbf z_*` (mean, std, covariance).
        """
        self._check_eval("explain")
        if self.covar_module.z_dims is None:
            if z is not None:
                raise ValueError("This model was built with z = x (no train_z); do not pass z.")
            x = self._check_x(x)
            z = x
        elif z is None:
            raise ValueError(f"This model explains with separate features z (d = {self.num_features}); pass z.")
        latent = self(x, None if self.covar_module.z_dims is None else z)
        predictive = self.likelihood(latent)
        weights = self.predict_weights(x)
        blocks = weights.lazy_covariance_matrix.point_blocks()
        return GPXExplanation(
            x=x.detach(),
            z=z.detach(),
            prediction_mean=predictive.mean.detach(),
            prediction_std=predictive.variance.clamp_min(0).sqrt().detach(),
            latent_std=latent.variance.clamp_min(0).sqrt().detach(),
            weights_mean=weights.mean.detach(),
            weights_covariance=blocks.detach(),
            feature_names=self.feature_names,
            intercept=float(self.intercept),
        )

    # ----------------------------------------------------------------- training
    def fit(
        self,
        optimizer: str = "lbfgs",
        max_iter: int | None = None,
        lr: float | None = None,
        tolerance: float | None = None,
        progress: bool = False,
    ) -> GPXModel:
        r"""Maximise the log marginal likelihood :math:`\log\mathcal N(\mathbf y\mid\mathbf m,\mathbf C)`
        (:func:`gpytorch_explain.fit_gpx_model`).

        The marginal likelihood is computed through a Cholesky factor up to
        ``n = max(gpytorch.settings.max_cholesky_size, gpytorch_explain.settings.max_cholesky_size)``
        (L-BFGS needs a deterministic objective) and with GPyTorch's CG/Lanczos estimators above. Before it
        starts, the memory of a path over the :math:`n\times n` covariance is checked (:meth:`check_memory`).

        :param optimizer: ``"lbfgs"`` (default; ``torch.optim.LBFGS`` with a strong-Wolfe line
            search) or ``"adam"``.
        :param max_iter: Iterations (default 100 for L-BFGS, 200 for Adam).
        :param lr: Step size (default 1.0 for L-BFGS, 0.05 for Adam).
        :param tolerance: L-BFGS stops when the gradient, the step or the change of the loss (the
            negative log marginal likelihood per sample) falls below this. Default ``min(1e-5, 1e-2 / n)``:
            the loss is per sample, so a fixed tolerance would stop large fits while the total log
            likelihood still gains whole nats (the GPX likelihood is flat in the output scale: on 10⁴
            rows, 1e-5 stopped a fit at an output scale of 0.73 that 1e-6 took to 0.94, gaining 0.6 nats).
        :param progress: Show a tqdm progress bar of iterations out of ``max_iter`` (objective evaluations, which
            L-BFGS's line search adds, are shown beside it).
        :return: ``self``, in eval mode; ``self.fit_history`` holds the losses (one per objective evaluation),
            ``self.fit_iterations`` the iterations.
        """
        return fit_gpx_model(
            self, optimizer=optimizer, max_iter=max_iter, lr=lr, tolerance=tolerance, progress=progress
        )

    # ----------------------------------------------------------------- BoTorch
    @property
    def intercept(self) -> Tensor:
        """The constant mean :math:`m` that the weights do not explain (0 without ``intercept``/``standardize_y``):
        ``explain(x).contributions_mean.sum(-1) + model.intercept`` is the predictive mean."""
        mean = self.mean_module
        if isinstance(mean, (ConstantMean, FixedConstantMean)):
            return mean.constant.detach().reshape(())
        return torch.zeros((), dtype=self._param_dtype(), device=self.covar_module.raw_weight_noise.device)

    @property
    def num_outputs(self) -> int:
        """The number of outputs as BoTorch reads it, always 1."""
        return 1

    @property
    def batch_shape(self) -> torch.Size:
        """The model batch shape as BoTorch reads it, always ``torch.Size([])`` (GPX models are not batched)."""
        return torch.Size([])

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform=None,
        **kwargs,
    ):
        r"""BoTorch's model interface (duck-typed, like ``botorch.models.model.Model``: ``posterior``,
        ``num_outputs``, ``batch_shape``): the joint posterior of :math:`f` (or :math:`y`) at each ``q``-batch of
        ``X``, a ``botorch.posteriors.GPyTorchPosterior``; see
        ``gpytorch_explain.models.gpx_botorch.gpx_posterior``. (No doctest here: importing BoTorch changes
        GPyTorch's global defaults for the rest of a test session; ``tests/models/test_gpx_botorch.py`` restores them.)

        Usage::

            model = GPXModel(x, y, standardize_x=True, standardize_y=True).fit()
            acq = qLogExpectedImprovement(model, best_f=y.max())
            candidate, value = optimize_acqf(acq, bounds=bounds, q=2, num_restarts=4, raw_samples=64)
        """
        return gpx_posterior(self, X, output_indices, observation_noise, posterior_transform)
