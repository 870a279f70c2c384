#!/usr/bin/env python3
r"""Variational GPX: GPX (Yoshikawa & Iwata) on GPyTorch's ``ApproximateGP``, for large data and any likelihood.

The objective is in :mod:`gpytorch_explain.mlls` (:class:`~gpytorch_explain.mlls.GPXVariationalELBO`), the
variational strategy in :mod:`gpytorch_explain.variational`, the training loop in :mod:`gpytorch_explain.fit`.

GPX explains each prediction by a local linear model whose weights are Gaussian processes,

.. math::

    y_i \sim p(y_i \mid f_i), \qquad f_i = \mathbf w_i^\top \mathbf z_i, \qquad
    \mathbf w_i = \mathbf g(\mathbf x_i) + \boldsymbol\epsilon_{w,i}, \qquad
    g_l \sim \mathcal{GP}(0, k) \ (l = 1..d), \qquad
    \boldsymbol\epsilon_{w,i} \sim \mathcal N(\mathbf 0, \sigma_w^2\mathbf I_d).

Here each latent :math:`g_l` gets inducing values :math:`\mathbf u_l = g_l(\mathbf U_l)` at :math:`M`
inducing points (shared, :math:`\mathbf U_l = \mathbf U`, or one set per latent), whitened as
:math:`\mathbf u_l = \mathbf L_l \mathbf v_l` with :math:`\mathbf L_l \mathbf L_l^\top = k(\mathbf U_l, \mathbf U_l)`,
and :math:`q(\mathbf v) = \mathcal N(\mathbf m, \mathbf S)` over all :math:`dM` whitened values jointly
(index ``latent * M + j``). Jointly matters: given :math:`y`, the weights of different features are strongly
(anti-)correlated, and only a joint :math:`q` contains the exact posterior (see
:class:`VariationalGPXModel`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from gpytorch.constraints import GreaterThan
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import (
    BernoulliLikelihood,
    GaussianLikelihood,
    Likelihood,
    MultitaskGaussianLikelihood,
    SoftmaxLikelihood,
)
from gpytorch.models import ApproximateGP
from gpytorch.variational import (
    CholeskyVariationalDistribution,
    MeanFieldVariationalDistribution,
    NaturalVariationalDistribution,
)
from linear_operator.operators import (
    IdentityLinearOperator,
    KroneckerProductLinearOperator,
    MatmulLinearOperator,
)
from torch import Tensor

from .._compat import _GaussianLikelihoodBase, _VariationalDistribution
from ..distributions import GPXMultivariateNormal
from ..explanation import GPXExplanation
from ..fit import fit_variational_gpx_model
from ..kernels import GPXKernel
from ..mlls.gpx_variational_elbo import _is_probit_bernoulli
from ..utils import check_feature_names, check_matrix, check_same_rows, median_heuristic_lengthscale
from ..utils.gp import kernel_diag
from ..variational import GPXVariationalStrategy

__all__ = ["WEIGHT_NOISE_FLOOR", "VariationalGPXModel"]

#: lower bound of :math:`\sigma_w^2` (``GreaterThan`` constraint): softplus of a very negative raw value is exactly 0
#: in float32 (and in float64 below about -745), which would make the weight noise vanish and the setter reject it
WEIGHT_NOISE_FLOOR = 1e-8


# ============================================================================ model
_DISTRIBUTIONS = ("cholesky", "natural", "meanfield", "independent")


class VariationalGPXModel(ApproximateGP):
    r"""GPX with sparse variational inference: minibatch training and any likelihood (e.g. GPX classification).

    The model is GPX (see :class:`~gpytorch_explain.GPXModel`) with a general likelihood,

    .. math::

        y_i \sim p(y_i\mid f_i), \quad f_i = \mathbf w_i^\top\mathbf z_i, \quad
        \mathbf w_i = \mathbf g(\mathbf x_i) + \boldsymbol\epsilon_{w,i}, \quad g_l\sim\mathcal{GP}(0,k),

    approximated with :math:`M` inducing points per latent and a Gaussian :math:`q` over the :math:`dM` whitened
    inducing values (:class:`GPXVariationalStrategy`). Then:

    * ``model(x, z)`` is :math:`q(f_*)` (a ``MultivariateNormal``; includes :math:`\sigma_w^2\|\mathbf z_*\|^2`)
      and ``model.likelihood(model(x, z))`` the predictive of :math:`y_*` (for ``BernoulliLikelihood``:
      :math:`p(y_*=1) = \Phi(\mu_*/\sqrt{1+\sigma_*^2})`);
    * :meth:`predict_weights` is :math:`q(\mathbf w_*) = q(\mathbf g(\mathbf X_*)) + \mathcal N(\mathbf 0,
      \sigma_w^2\mathbf I)`, jointly over points and features;
    * :meth:`explain` returns a :class:`~gpytorch_explain.GPXExplanation`.

    Train with :meth:`fit` or by hand: inputs are rows :math:`[\mathbf x\mid\mathbf z]` (just :math:`\mathbf x` when
    z = x), so a plain ``DataLoader`` minibatches them, and the objective is
    ``GPXVariationalELBO(model.likelihood, model, num_data)`` (tight; see :class:`GPXVariationalELBO`) or GPyTorch's
    ``VariationalELBO``. ``model.parameters()`` includes the likelihood's.

    With a joint :math:`q` (``"cholesky"`` or ``"natural"``), a Gaussian likelihood, :math:`\mathbf U = \mathbf X`
    and the optimal :math:`q`, the tight ELBO equals the exact log marginal likelihood and :meth:`predict_weights`
    equals :meth:`GPXModel.predict_weights` (up to the jitter). ``"independent"`` (one :math:`M\times M` block per
    latent) and ``"meanfield"`` are cheaper but cannot represent the posterior correlation between features.

    :param inducing_points: :math:`\mathbf U`, ``(M, D)`` shared by the latents, or ``(d, M, D)``.
    :param z_dims: :math:`d` when the explanation features :math:`\mathbf z` are separate columns; ``None`` means
        :math:`\mathbf z = \mathbf x` (:math:`d = D`).
    :param likelihood: Any one-dimensional GPyTorch likelihood (default: ``GaussianLikelihood`` with
        :math:`\sigma_y^2 = 0.01`).
    :param base_kernel: :math:`k` on :math:`\mathbf x`, shared by the latents (no batch shape; default
        ``ScaleKernel(RBFKernel())``, outputscale 1, lengthscale from the median heuristic on :math:`\mathbf U`).
    :param variational_distribution: ``"cholesky"`` (default), ``"natural"`` (for natural-gradient descent),
        ``"meanfield"``, ``"independent"``, or a GPyTorch variational distribution of shape ``(d*M,)`` or
        batch ``(d,)`` x ``M``.
    :param learn_inducing_locations: Whether :math:`\mathbf U` is trained.
    :param jitter_val: Jitter of :math:`k(\mathbf U,\mathbf U)` (default: GPyTorch's variational jitter, which depends
        on the dtype: 1e-4 in float32, 1e-6 in float64, so float32 and float64 models differ by about 1e-3 in relative
        terms unless ``jitter_val`` is set).
    :param weight_noise: Initial :math:`\sigma_w^2`. It is constrained to :math:`\sigma_w^2 \ge`
        ``WEIGHT_NOISE_FLOOR`` :math:`= 10^{-8}` (``GreaterThan``), so it never underflows to exactly 0 (float32
        included), and the setter accepts any fitted value (``model.weight_noise = other.weight_noise.detach()``,
        raised to the floor).
    :param feature_names: Optional names of the :math:`d` features (default ``x0, x1, ...`` when z = x).

    Labels of a ``BernoulliLikelihood`` must be all in :math:`\{0, 1\}` or all in :math:`\{-1, +1\}` (checked in
    :meth:`fit` across batches and in :class:`GPXVariationalELBO`); ``SoftmaxLikelihood`` / multitask likelihoods and
    half precision are refused at construction. As with GPyTorch's own variational strategies,
    ``gpytorch.settings.skip_posterior_variances`` is not used: the variances are always computed.

    Example:
        >>> import torch
        >>> from gpytorch_explain import VariationalGPXModel
        >>> x = torch.randn(500, 3, dtype=torch.float64)
        >>> y = x[:, 0] * torch.sin(x[:, 1])
        >>> model = VariationalGPXModel(x[:16]).fit(x, y, num_epochs=2, batch_size=100)
        >>> weights = model.predict_weights(x[:5])
        >>> weights.mean.shape, weights.covariance_matrix.shape
        (torch.Size([5, 3]), torch.Size([15, 15]))
    """

    def __init__(
        self,
        inducing_points: Tensor,
        z_dims: int | None = None,
        likelihood: Likelihood | None = None,
        base_kernel: Kernel | None = None,
        variational_distribution: str | _VariationalDistribution = "cholesky",
        learn_inducing_locations: bool = True,
        jitter_val: float | None = None,
        weight_noise: float = 0.01,
        feature_names: Sequence[str] | None = None,
    ):
        if not torch.is_tensor(inducing_points):
            raise TypeError(f"inducing_points must be a torch.Tensor, got {type(inducing_points).__name__}.")
        if inducing_points.dim() == 3:
            check_matrix("inducing_points[0]", inducing_points[0])
            check_matrix("inducing_points", inducing_points.reshape(-1, inducing_points.size(-1)))
        else:
            check_matrix("inducing_points", inducing_points)
        if inducing_points.size(-2) == 0:
            raise ValueError("inducing_points has no rows; at least one inducing point is needed.")
        if z_dims is not None and (isinstance(z_dims, bool) or not isinstance(z_dims, int) or z_dims < 1):
            raise ValueError(f"z_dims must be a positive int or None, got {z_dims!r}.")
        x_dims = inducing_points.size(-1)
        d = x_dims if z_dims is None else z_dims
        if inducing_points.dim() == 3 and inducing_points.size(0) != d:
            raise ValueError(
                f"Per-latent inducing_points must have shape (d, M, D) with d = {d}, "
                f"got {tuple(inducing_points.shape)}."
            )
        dtype, device = inducing_points.dtype, inducing_points.device
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(
                f"inducing_points has dtype {dtype}; VariationalGPXModel supports float32 and float64 only (half "
                "precision cannot hold the Cholesky factors and solves): convert with .float() or .double()."
            )
        num_inducing = inducing_points.size(-2)

        if likelihood is None:
            likelihood = GaussianLikelihood().to(dtype=dtype, device=device)  # float64 values stay float64
            likelihood.noise = torch.tensor(0.01, dtype=dtype)
        elif not isinstance(likelihood, Likelihood):
            raise TypeError(f"likelihood must be a gpytorch Likelihood, got {type(likelihood).__name__}.")
        elif isinstance(likelihood, (MultitaskGaussianLikelihood, SoftmaxLikelihood)):
            raise TypeError(
                f"VariationalGPXModel has one latent output f = wᵀz, so {type(likelihood).__name__} (a multitask / "
                "multi-class likelihood, which needs several latent functions) is not supported. Supported: any "
                "likelihood of one latent value per point, e.g. GaussianLikelihood, BernoulliLikelihood (binary "
                "classification, labels {0, 1} or {-1, +1}), StudentTLikelihood, LaplaceLikelihood, "
                "BetaLikelihood. For C > 2 classes, fit one binary (one-vs-rest) model per class."
            )

        if base_kernel is None:
            base_kernel = ScaleKernel(RBFKernel()).to(dtype=dtype, device=device)
            base_kernel.outputscale = 1.0
            flat = inducing_points.detach().reshape(-1, x_dims)
            if flat.size(0) >= 2:
                base_kernel.base_kernel.lengthscale = median_heuristic_lengthscale(flat)
        elif not isinstance(base_kernel, Kernel):
            raise TypeError(f"base_kernel must be a gpytorch Kernel, got {type(base_kernel).__name__}.")
        elif base_kernel.batch_shape != torch.Size([]):
            raise ValueError(
                f"base_kernel must have no batch shape (one kernel k shared by the latents, as in GPX), "
                f"got batch_shape {tuple(base_kernel.batch_shape)}."
            )

        if isinstance(variational_distribution, str):
            kind = variational_distribution.lower()
            if kind == "cholesky":
                variational_distribution = CholeskyVariationalDistribution(d * num_inducing)
            elif kind == "natural":
                variational_distribution = NaturalVariationalDistribution(d * num_inducing)
            elif kind == "meanfield":
                variational_distribution = MeanFieldVariationalDistribution(d * num_inducing)
            elif kind == "independent":
                variational_distribution = CholeskyVariationalDistribution(num_inducing, batch_shape=torch.Size([d]))
            else:
                raise ValueError(f"variational_distribution must be one of {_DISTRIBUTIONS}, got {kind!r}.")
        elif not isinstance(variational_distribution, _VariationalDistribution):
            raise TypeError(
                "variational_distribution must be a string or a gpytorch variational distribution, "
                f"got {type(variational_distribution).__name__}."
            )

        strategy = GPXVariationalStrategy(
            self, inducing_points, variational_distribution, d, learn_inducing_locations, jitter_val
        )
        super().__init__(strategy)
        self.likelihood = likelihood
        self.covar_module = GPXKernel(
            base_kernel, x_dims=x_dims, z_dims=z_dims, weight_noise_constraint=GreaterThan(WEIGHT_NOISE_FLOOR)
        )
        self.to(dtype=dtype, device=device)
        self.weight_noise = weight_noise

        self.feature_names = check_feature_names(feature_names, d)

    # ----------------------------------------------------------------- properties
    @property
    def x_dims(self) -> int:
        """:math:`D`, the number of columns of :math:`\\mathbf x`."""
        return self.covar_module.x_dims

    @property
    def z_dims(self) -> int | None:
        """:math:`d` for separate explanation features, ``None`` when :math:`\\mathbf z = \\mathbf x`."""
        return self.covar_module.z_dims

    @property
    def num_features(self) -> int:
        """:math:`d`, the number of explanation features (latent GPs)."""
        return self.variational_strategy.num_features

    @property
    def weight_noise(self) -> Tensor:
        r""":math:`\sigma_w^2`, the variance of the weight noise."""
        return self.covar_module.weight_noise

    @weight_noise.setter
    def weight_noise(self, value: Tensor | float) -> None:
        r"""Set :math:`\sigma_w^2`; values below ``WEIGHT_NOISE_FLOOR`` :math:`= 10^{-8}` (including an exact 0, e.g. a
        value that underflowed in another model) are raised to the floor. Negative or non-finite values raise."""
        raw = self.covar_module.raw_weight_noise
        value = value.detach() if torch.is_tensor(value) else torch.as_tensor(value, dtype=raw.dtype)
        value = value.to(dtype=raw.dtype, device=raw.device)
        if not torch.isfinite(value).all() or (value < 0).any():
            raise ValueError(f"weight_noise must be a finite non-negative variance, got {value}.")
        floor = WEIGHT_NOISE_FLOOR * (1 + 64 * torch.finfo(raw.dtype).eps)  # keeps the inverse softplus finite
        self.covar_module.weight_noise = value.clamp_min(floor)

    @property
    def base_kernel(self) -> Kernel:
        """The kernel :math:`k` on :math:`\\mathbf x`."""
        return self.covar_module.base_kernel

    @property
    def inducing_points(self) -> Tensor:
        r""":math:`\mathbf U`, ``(M, D)`` or ``(d, M, D)``."""
        return self.variational_strategy.inducing_points

    def _dtype(self) -> torch.dtype:
        return self.covar_module.raw_weight_noise.dtype

    # ----------------------------------------------------------------- inputs
    def _check_x(self, x: Tensor, name: str = "x") -> Tensor:
        x = check_matrix(name, x, cols=self.x_dims, cols_name=f"columns (the model's x has D = {self.x_dims})")
        if x.dtype != self._dtype():
            raise TypeError(f"{name} has dtype {x.dtype} but the model is {self._dtype()}.")
        return x

    def _make_inputs(self, x: Tensor, z: Tensor | None) -> Tensor:
        """The input rows ``[x | z]`` (``x`` when z = x), validated."""
        if not torch.is_tensor(x):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}.")
        if self.z_dims is None:
            if z is not None:
                raise ValueError("This model was built with z = x (z_dims=None); do not pass z.")
            return self._check_x(x)
        if z is None:
            width = self.x_dims + self.z_dims
            if x.dim() == 2 and x.size(-1) == width:  # already-joined rows [x | z], e.g. from a DataLoader
                check_matrix("x", x)
                if x.dtype != self._dtype():
                    raise TypeError(f"x has dtype {x.dtype} but the model is {self._dtype()}.")
                return x
            raise ValueError(
                f"This model explains with separate features z (d = {self.z_dims}); call model(x, z) or pass "
                f"joined rows [x | z] with {width} columns (got shape {tuple(x.shape)})."
            )
        x = self._check_x(x)
        z = check_matrix("z", z, cols=self.z_dims, cols_name=f"columns (the model's z has d = {self.z_dims})")
        if z.dtype != x.dtype:
            raise TypeError(f"x and z must share one dtype, got {x.dtype} and {z.dtype}.")
        check_same_rows(x=x, z=z)
        return torch.cat([x, z], dim=-1)

    # ----------------------------------------------------------------- GPyTorch API
    def forward(self, inputs: Tensor) -> GPXMultivariateNormal:
        r"""The GPX prior of :math:`\mathbf f`: :math:`\mathcal N(\mathbf 0, (\mathbf K+\sigma_w^2\mathbf I)\odot
        \mathbf Z\mathbf Z^\top)`, carrying the weight-noise variance :math:`\sigma_w^2\|\mathbf z_i\|^2`."""
        covar = self.covar_module(inputs)
        _, z = self.covar_module.split_inputs(inputs)
        mean = torch.zeros(covar.shape[:-1], dtype=covar.dtype, device=covar.device)
        return GPXMultivariateNormal(mean, covar, weight_noise_variance=self.weight_noise * z.square().sum(-1))

    def __call__(self, x: Tensor, z: Tensor | None = None, prior: bool = False, **kwargs) -> MultivariateNormal:
        r""":math:`q(\mathbf f_*)` at :math:`(\mathbf x_*, \mathbf z_*)` (the prior when ``prior=True``)."""
        return super().__call__(self._make_inputs(x, z), prior=prior, **kwargs)

    # ----------------------------------------------------------------- weights
    def _weight_terms(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        strategy = self.variational_strategy
        if self.training:
            strategy._clear_cache()
        strategy._maybe_initialize()
        mean_v, middle = strategy.moments()
        interp = strategy.interp(x).expand(self.num_features, x.size(0), strategy.num_inducing)  # (d, m, M)
        return interp, mean_v, middle, kernel_diag(self.base_kernel, x) + self.weight_noise

    def predict_weights(self, x: Tensor) -> MultitaskMultivariateNormal:
        r"""Variational posterior of the local weights :math:`\mathbf w_*=\mathbf g(\mathbf x_*)+\boldsymbol\epsilon_w`.

        With :math:`\mathbf A_l = k(\mathbf X_*,\mathbf U_l)\mathbf L_l^{-\top}` and :math:`\mathbf H`
        (:math:`md\times dM`) the block matrix with :math:`\mathbf H_{(p,l),(l',j)} = \delta_{ll'}(\mathbf A_l)_{pj}`,

        .. math::

            \mathbb E[w_{pl}] = (\mathbf A_l\mathbf m_l)_p, \qquad
            \operatorname{Cov}[\mathbf w_*] = (\mathbf K_{**}+\sigma_w^2\mathbf I)\otimes\mathbf I_d
            + \mathbf H(\mathbf S-\mathbf I)\mathbf H^\top,

        interleaved (index ``point * d + feature``) like :meth:`GPXModel.predict_weights`, held lazily
        (Kronecker plus rank-:math:`dM`; ``.variance`` costs :math:`O(m\,d^2M^2)`). Features are correlated
        through :math:`\mathbf S` unless :math:`q` is independent per latent.

        :param x: Test inputs :math:`\mathbf x_*`, ``(m, D)``.
        :return: ``MultitaskMultivariateNormal`` with mean ``(m, d)``.
        """
        x = self._check_x(x)
        interp, mean_v, middle, _ = self._weight_terms(x)
        d, m, num = interp.shape
        mean = torch.einsum("lpj,lj->pl", interp, mean_v)
        h = torch.diag_embed(interp.permute(1, 2, 0)).permute(0, 2, 3, 1)  # (m, d, d, M): delta_ll' A_l[p]
        h = h.reshape(m * d, d * num)
        h_mid = torch.einsum("lpj,ljc->plc", interp, self.variational_strategy.full_middle(middle).view(d, num, -1))
        prior = self.base_kernel(x).add_diagonal(self.weight_noise.expand(m))
        eye = IdentityLinearOperator(d, dtype=x.dtype, device=x.device)
        covar = KroneckerProductLinearOperator(prior, eye) + MatmulLinearOperator(h, h_mid.reshape(m * d, -1).mT)
        return MultitaskMultivariateNormal(mean, covar, interleaved=True)

    def weight_blocks(self, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""Mean ``(m, d)`` and per-point covariance ``(m, d, d)`` of :math:`q(\mathbf w_*)` in
        :math:`O(m\,d^2M^2)` (:math:`O(m\,dM^2)` for independent latents), without the joint matrix."""
        x = self._check_x(x)
        interp, mean_v, middle, prior_diag = self._weight_terms(x)
        d = interp.size(0)
        mean = torch.einsum("lpj,lj->pl", interp, mean_v)
        if middle.dim() == 2:
            blocks_mid = middle.view(d, interp.size(-1), d, interp.size(-1))
            blocks = torch.einsum("lpj,ljkq,kpq->plk", interp, blocks_mid, interp)
        else:
            blocks = torch.diag_embed(torch.einsum("lpj,ljq,lpq->pl", interp, middle, interp))
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        return mean, blocks + prior_diag[:, None, None] * eye

    def explain(self, x: Tensor, z: Tensor | None = None) -> GPXExplanation:
        r"""Predictions with per-sample explanations at :math:`(\mathbf x_*, \mathbf z_*)`.

        ``prediction_mean`` / ``prediction_std`` are the mean and std of the likelihood's predictive of
        :math:`y_*`: for a Gaussian likelihood :math:`\mu_*` and :math:`\sqrt{\sigma_*^2+\sigma_y^2}`; for
        ``BernoulliLikelihood`` the class-1 probability :math:`p_* = \Phi(\mu_*/\sqrt{1+\sigma_*^2})` and the
        Bernoulli std :math:`\sqrt{p_*(1-p_*)}`; for likelihoods whose predictive GPyTorch samples, the moments of
        the sample mixture. ``latent_std`` is the std of :math:`f_*` (with the weight noise); the weights and the
        contributions :math:`\mathbf w_*\odot\mathbf z_*` are on the latent scale (for classification the probit
        scale: ``summary()`` and ``plot()`` label the latent sum and :math:`P(y=1)` separately).
        """
        if self.z_dims is None:
            if z is not None:
                raise ValueError("This model was built with z = x (z_dims=None); do not pass z.")
            x = self._check_x(x)
            z = x
        elif z is None:
            raise ValueError(f"This model explains with separate features z (d = {self.z_dims}); pass z.")
        latent = self(x, None if self.z_dims is None else z)
        predictive = self.likelihood(latent)
        mean, var = predictive.mean, predictive.variance
        if mean.dim() > 1:  # a batch of likelihood samples: moments of the mixture
            var = var.mean(0) + mean.var(0, unbiased=False)
            mean = mean.mean(0)
        weights_mean, blocks = self.weight_blocks(x)
        if isinstance(self.likelihood, BernoulliLikelihood):
            outcome, scale = "probability", "probit" if _is_probit_bernoulli(self.likelihood) else "link"
        elif isinstance(self.likelihood, _GaussianLikelihoodBase):
            outcome, scale = "regression", "latent"
        else:
            outcome, scale = "other", "latent"
        return GPXExplanation(
            x=x.detach(),
            z=z.detach(),
            prediction_mean=mean.detach(),
            prediction_std=var.clamp_min(0).sqrt().detach(),
            latent_std=latent.variance.clamp_min(0).sqrt().detach(),
            weights_mean=weights_mean.detach(),
            weights_covariance=blocks.detach(),
            feature_names=self.feature_names,
            outcome=outcome,
            latent_scale=scale,
        )

    # ----------------------------------------------------------------- training
    def fit(
        self,
        train_x: Tensor | Iterable,
        train_y: Tensor | None = None,
        train_z: Tensor | None = None,
        num_epochs: int = 10,
        lr: float = 0.01,
        batch_size: int = 1024,
        ngd_lr: float = 0.1,
        objective: str = "gpx",
        num_data: int | None = None,
        shuffle: bool = True,
        generator: torch.Generator | None = None,
        progress: bool = False,
    ) -> VariationalGPXModel:
        r"""Maximise the ELBO by minibatch stochastic optimisation: :func:`gpytorch_explain.fit_variational_gpx_model`.

        :param train_x: Either a tensor :math:`\mathbf X` (``(n, D)``; with ``train_y`` and, for separate features,
            ``train_z``), minibatched here, or a ``DataLoader`` (any iterable) of batches ``(inputs, y)`` with input
            rows :math:`[\mathbf x\mid\mathbf z]` or ``(x, z, y)``.
        :param num_epochs: Passes over the data.
        :param lr: Adam step size (hyperparameters, inducing points and, unless ``q`` is natural, ``q``).
        :param batch_size: Minibatch size when ``train_x`` is a tensor.
        :param ngd_lr: Natural-gradient step size, used when the variational distribution is natural
            (``variational_distribution="natural"``); then ``q`` is updated by ``gpytorch.optim.NGD``.
        :param objective: ``"gpx"`` (:class:`GPXVariationalELBO`, default) or ``"elbo"`` (GPyTorch's
            ``VariationalELBO``, weight noise inside :math:`q(f)`; looser).
        :param num_data: :math:`n` for the ELBO's scaling (default: the dataset's length).
        :param shuffle: Whether the internal ``DataLoader`` shuffles the data.
        :param generator: The ``torch.Generator`` of that shuffling.
        :param progress: Show a tqdm progress bar over epochs.
        :return: ``self`` in eval mode; ``self.fit_history`` holds the mean loss (negative ELBO per datum) of each
            epoch.
        """
        return fit_variational_gpx_model(
            self,
            train_x,
            train_y,
            train_z,
            num_epochs=num_epochs,
            lr=lr,
            batch_size=batch_size,
            ngd_lr=ngd_lr,
            objective=objective,
            num_data=num_data,
            shuffle=shuffle,
            generator=generator,
            progress=progress,
        )
