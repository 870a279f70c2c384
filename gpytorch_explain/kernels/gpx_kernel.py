#!/usr/bin/env python3
r"""The GPX covariance :math:`(k(\mathbf x, \mathbf x') + \sigma_w^2\delta)\,\mathbf z^\top\mathbf z'`."""

from __future__ import annotations

import warnings

import torch
from gpytorch import settings as gsettings
from gpytorch.constraints import Interval
from gpytorch.kernels import InducingPointKernel, Kernel, ProductStructureKernel
from gpytorch.priors import Prior
from linear_operator import to_dense
from linear_operator.operators import (
    DiagLinearOperator,
    LinearOperator,
    MatmulLinearOperator,
    to_linear_operator,
)
from torch import Tensor

from .. import settings as explain_settings
from ..constraints import FlooredPositive
from ..mlls.gpx_inducing_point_added_loss_term import GPXInducingPointAddedLossTerm
from ..operators import GPXInducingLinearOperator, LowRankHadamardLinearOperator
from ..operators.sample_diag_added_linear_operator import _SampleDiagAddedLinearOperator
from ..settings import block_budget
from ..utils.gp import kernel_diag
from .ski_features import gpytorch_grid_order_matters, grid_features, grid_operator, supports_grid_features

__all__ = ["GPXKernel"]


def _has_product_structure(kernel: Kernel) -> bool:
    return any(isinstance(m, ProductStructureKernel) for m in kernel.modules())


def inducing_features(kernel: InducingPointKernel, x: Tensor) -> Tensor:
    r"""Nyström features :math:`\boldsymbol\Phi = \mathbf K_{xU}\mathbf L_{UU}^{-\top}`.

    :math:`\mathbf Q = \boldsymbol\Phi\boldsymbol\Phi^\top` is the inducing-point approximation of the kernel.
    Rows are computed in blocks; without autograd they are written into one preallocated result, so the
    peak memory is :math:`\boldsymbol\Phi` plus one block.
    """
    inducing = kernel.inducing_points
    inv_root = kernel._inducing_inv_root
    rows = x.size(-2)
    block = max(1, block_budget("feature_block") // max(inducing.size(-2), 1))
    if rows <= block:
        return to_dense(kernel.base_kernel(x, inducing)) @ inv_root

    def part(i: int) -> Tensor:
        return to_dense(kernel.base_kernel(x[..., i : i + block, :], inducing)) @ inv_root

    if torch.is_grad_enabled():
        return torch.cat([part(i) for i in range(0, rows, block)], dim=-2)
    first = part(0)
    out = first.new_empty(*first.shape[:-2], rows, first.size(-1))
    out[..., :block, :] = first
    for i in range(block, rows, block):
        out[..., i : i + block, :] = part(i)
    return out


def _different_rows_of_one_buffer(x1: Tensor, x2: Tensor) -> bool:
    r"""Whether ``x1`` and ``x2`` are views of one tensor at different row (or batch) positions.

    ``ExactGP`` evaluates the kernel lazily on ``full = cat([train_x, test_x])`` and slices it: its test/train block is
    the kernel at ``(full[n:], full[:n])``, two views of one buffer whose storage offsets differ by a whole number of
    rows. Those are different samples even when their values are equal (predicting at the training inputs). Same
    storage, same strides and storage offsets differing by a nonzero multiple of the row stride say so; anything
    else (copies, equal offsets, tensors without storage such as functorch's batched tensors) is ``False``.
    """
    if x1.dim() < 2 or x1.shape != x2.shape:
        return False
    try:
        if x1.untyped_storage().data_ptr() != x2.untyped_storage().data_ptr() or x1.stride() != x2.stride():
            return False
        row = x1.stride(-2)
        shift = x2.storage_offset() - x1.storage_offset()
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):  # no storage (subclasses, functorch)
        return False
    return row != 0 and shift != 0 and shift % row == 0


class GPXKernel(Kernel):
    r"""Covariance of :math:`f_i = \mathbf w_i^\top \mathbf z_i` in GPX (Yoshikawa & Iwata).

    GPX puts independent GP priors on the :math:`d` coordinates of a local weight vector,
    :math:`\mathbf w_i = \mathbf g(\mathbf x_i) + \boldsymbol\epsilon_{w,i}` with
    :math:`g_l \sim \mathcal{GP}(0, k)` and :math:`\boldsymbol\epsilon_{w,i} \sim
    \mathcal N(\mathbf 0, \sigma_w^2 \mathbf I_d)`, so that

    .. math::

        \operatorname{Cov}(f_i, f_j) = \left(k(\mathbf x_i, \mathbf x_j) + \sigma_w^2 \delta_{ij}\right)
        \mathbf z_i^\top \mathbf z_j ,
        \qquad
        \operatorname{Cov}(\mathbf f) = (\mathbf K + \sigma_w^2 \mathbf I) \odot \mathbf Z \mathbf Z^\top .

    The weight-noise term is tied to the *sample* index. ``GPXKernel`` follows GPyTorch's ``Kernel``
    contract (``Kernel.__call__`` selects ``active_dims`` and returns a ``LazyEvaluatedKernelTensor``;
    :meth:`forward` returns linear operators), and "same samples" is decided as GPyTorch decides
    :math:`\mathbf X_1 = \mathbf X_2` (``torch.equal``, same shape and values), except that rows at different
    positions of one tensor are different samples (this is how ``ExactGP`` slices its joint train/test covariance),
    unless ``same_samples`` says otherwise:

    .. math::

        \texttt{kernel}(\mathbf X_1, \mathbf X_2) =
        \begin{cases}
        (\mathbf K_{11} + \sigma_w^2\mathbf I) \odot \mathbf Z_1\mathbf Z_1^\top
            & \mathbf X_1 = \mathbf X_2 \text{ (or } \texttt{same\_samples=True}\text{)},\\
        \mathbf K_{12} \odot \mathbf Z_1\mathbf Z_2^\top
            & \text{otherwise (or } \texttt{same\_samples=False}\text{)}.
        \end{cases}

    So ``kernel(X)``, ``kernel(X, X)``, ``kernel(X, X.clone())`` and ``kernel(X, diag=True)`` carry
    :math:`\sigma_w^2\|\mathbf z_i\|^2`; ``kernel(X1, X2, same_samples=False)`` is the cross-covariance between
    two sets of samples even when they are equal (e.g. predictions at the training inputs). In an ``ExactGP``,
    ``GPyTorch`` slices the lazy joint train+test covariance before evaluating it, so its test/train block is the
    kernel at ``(full[n:], full[:n])`` with ``full = cat([X_train, X_test])``: two views of one tensor at different
    row positions, hence a cross-covariance without :math:`\sigma_w^2` even when ``X_test`` equals ``X_train``,
    while the test/test block (``full[n:]`` twice) is joint. This holds for a GPX kernel anywhere in the model's
    kernel: at the top, under ``ScaleKernel``, or inside ``AdditiveKernel``/``ProductKernel`` (where GPyTorch's
    default prediction strategy is used). Likewise, slices of the lazy ``kernel(X)`` are the kernel at the sliced
    inputs (GPyTorch's ``LazyEvaluatedKernelTensor``): a block whose rows and columns select different inputs has
    no :math:`\sigma_w^2`; ``kernel(X).evaluate_kernel()`` is the joint operator, sliced by sample index.
    :class:`~gpytorch_explain.GPXPredictionStrategy` (returned by :meth:`prediction_strategy`, to which
    ``ScaleKernel`` and ``AdditiveStructureKernel`` delegate) also removes a sample diagonal from the test/train
    block if one is there. One case remains: inside ``AdditiveKernel``/``ProductKernel``, a GPX kernel that has its
    own ``active_dims``, or sits under a kernel with ``active_dims`` below the composite (e.g.
    ``ScaleKernel(GPXKernel(...), active_dims=...)`` as a summand), receives ``index_select`` copies of the test and
    training rows, which no longer tell the rows apart. Predicting there at inputs equal to the training inputs
    needs ``gpytorch.settings.lazily_evaluate_kernels(False)`` (the joint is then sliced by sample index), or the
    column selection moved off that path, so that the GPX kernel itself has no ``active_dims`` (it reads its
    columns through ``x_dims``/``z_dims``; the other summands or factors take ``active_dims``). A GPX kernel with
    its own ``active_dims`` that receives equal inputs as two copies warns once (already while training such a
    composite); under a wrapper with ``active_dims`` it cannot know and does not.

    Inputs carry both representations: each row is :math:`[\mathbf x_i \,|\, \mathbf z_i]`
    (``x_dims`` columns of :math:`\mathbf x` followed by ``z_dims`` columns of :math:`\mathbf z`).
    With ``z_dims=None`` the explanation features are the inputs themselves
    (:math:`\mathbf z = \mathbf x`) and rows are plain :math:`\mathbf x_i`.
    Carrying :math:`\mathbf z` inside the inputs keeps GPyTorch's train/test slicing (and
    BoTorch) working unchanged.

    The result is lazy: :class:`~gpytorch_explain.LowRankHadamardLinearOperator` around
    whatever operator the base kernel returns (dense, KISS-GP, KeOps, ...), plus a diagonal.
    With an ``InducingPointKernel`` (SGPR) base, :math:`\mathbf K` is the Nyström
    :math:`\mathbf Q = \boldsymbol\Phi\boldsymbol\Phi^\top` and the joint covariance is a
    :class:`~gpytorch_explain.operators.GPXInducingLinearOperator`, solved exactly by Woodbury in
    :math:`O(nd^2M^2)`; in training mode the GPX trace term of Titsias' bound
    (:class:`GPXInducingPointAddedLossTerm`) replaces GPyTorch's SGPR term, and in eval mode the
    sample diagonal carries :math:`\|\mathbf z_i\|^2(k_{ii} - q_{ii})` when
    ``gpytorch.settings.sgpr_diagonal_correction`` is on (as GPyTorch's SGPR does). With a KISS-GP base
    (``GridInterpolationKernel``, in ``ScaleKernel``, ``AdditiveStructureKernel`` or ``ProductStructureKernel``),
    the same Woodbury operator is built from exact grid features
    :math:`\mathbf K_{\mathrm{SKI}} = \boldsymbol\Phi\boldsymbol\Phi^\top`
    (:func:`~gpytorch_explain.kernels.grid_features`; see :class:`gpytorch_explain.settings.use_grid_features`).

    :param base_kernel: The kernel :math:`k` on :math:`\mathbf x`.
    :param x_dims: :math:`D`, the number of input columns of :math:`\mathbf x`.
    :param z_dims: :math:`d`, the number of explanation features when they are given separately
        (``None``: :math:`\mathbf z = \mathbf x`).
    :param weight_noise_prior: Optional prior on :math:`\sigma_w^2`.
    :param weight_noise_constraint: Constraint on :math:`\sigma_w^2` (default:
        :class:`~gpytorch_explain.constraints.FlooredPositive`, a softplus that never underflows to 0).

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain import GPXKernel
        >>> kernel = GPXKernel(gpytorch.kernels.RBFKernel(), x_dims=3)
        >>> x = torch.randn(10, 3)
        >>> kernel(x).shape
        torch.Size([10, 10])
        >>> joint, cross = kernel(x, x.clone()), kernel(x, x, same_samples=False)
        >>> z2 = x.pow(2).sum(-1)  # here z = x
        >>> torch.allclose(joint.diagonal() - cross.diagonal(), kernel.weight_noise * z2)
        True
    """

    has_lengthscale = False

    def __init__(
        self,
        base_kernel: Kernel,
        x_dims: int,
        z_dims: int | None = None,
        weight_noise_prior: Prior | None = None,
        weight_noise_constraint: Interval | None = None,
        **kwargs,
    ):
        if not isinstance(base_kernel, Kernel):
            raise TypeError(f"base_kernel must be a gpytorch Kernel, got {type(base_kernel).__name__}.")
        if int(x_dims) < 1 or (z_dims is not None and int(z_dims) < 1):
            raise ValueError(f"x_dims and z_dims must be positive, got {x_dims} and {z_dims}.")
        super().__init__(batch_shape=base_kernel.batch_shape, **kwargs)
        self.base_kernel = base_kernel
        self._warned_grid_order = False
        self.x_dims = int(x_dims)
        self.z_dims = None if z_dims is None else int(z_dims)
        self.register_buffer("feature_scale", None)

        if weight_noise_constraint is None:
            weight_noise_constraint = FlooredPositive()
        self.register_parameter("raw_weight_noise", torch.nn.Parameter(torch.zeros(*self.batch_shape, 1)))
        self.register_constraint("raw_weight_noise", weight_noise_constraint)
        if weight_noise_prior is not None:
            self.register_prior(
                "weight_noise_prior", weight_noise_prior, lambda m: m.weight_noise, lambda m, v: m._set_weight_noise(v)
            )

    # --------------------------------------------------------------- params
    @property
    def weight_noise(self) -> Tensor:
        r""":math:`\sigma_w^2`, the variance of the weight noise (shape ``(*batch_shape, 1)``)."""
        return self.raw_weight_noise_constraint.transform(self.raw_weight_noise)

    @weight_noise.setter
    def weight_noise(self, value: Tensor | float) -> None:
        self._set_weight_noise(value)

    def _set_weight_noise(self, value: Tensor | float) -> None:
        if not torch.is_tensor(value):
            value = torch.as_tensor(value, dtype=self.raw_weight_noise.dtype, device=self.raw_weight_noise.device)
        value = value.to(self.raw_weight_noise)
        if not torch.all(value > 0):
            raise ValueError(f"weight_noise must be positive, got {value}.")
        self.initialize(raw_weight_noise=self.raw_weight_noise_constraint.inverse_transform(value))

    # --------------------------------------------------------------- inputs
    @property
    def input_dims(self) -> int:
        """Number of columns an input row has (``x_dims`` or ``x_dims + z_dims``)."""
        return self.x_dims if self.z_dims is None else self.x_dims + self.z_dims

    def split_inputs(self, inputs: Tensor) -> tuple[Tensor, Tensor]:
        r"""Split rows :math:`[\mathbf x \,|\, \mathbf z]` into :math:`(\mathbf X, \mathbf Z)`."""
        if inputs.size(-1) != self.input_dims:
            raise ValueError(
                f"GPXKernel expects inputs with {self.input_dims} columns "
                f"({self.x_dims} for x" + ("" if self.z_dims is None else f" + {self.z_dims} for z") + f"), "
                f"got {inputs.size(-1)}."
            )
        if self.z_dims is None:
            x, z = inputs, inputs
        else:
            x, z = inputs[..., : self.x_dims], inputs[..., self.x_dims :]
        scale = self.feature_scale
        return (x, z) if scale is None else (x, z * scale)

    def set_feature_scale(self, scale: Tensor | None) -> None:
        r"""Scale the explanation features inside the kernel, :math:`\tilde{\mathbf z} = \mathbf c \odot \mathbf z`
        (a buffer ``feature_scale``, saved in the state dict; ``None`` removes it).

        The covariance becomes :math:`(k + \sigma_w^2\delta)\,\tilde{\mathbf z}^\top\tilde{\mathbf z}'`: the
        prior of the weight of the raw feature :math:`l` is scaled by :math:`c_l`
        (:math:`w_l = c_l \tilde w_l`). :class:`~gpytorch_explain.GPXModel` uses it to standardise.
        """
        if scale is None:
            self._buffers["feature_scale"] = None
            return
        scale = torch.as_tensor(scale, dtype=self.raw_weight_noise.dtype, device=self.raw_weight_noise.device)
        d = self.x_dims if self.z_dims is None else self.z_dims
        if scale.shape != (d,) or not torch.all(torch.isfinite(scale) & (scale > 0)):
            raise ValueError(f"feature_scale must hold {d} positive finite values, got {scale}.")
        self._buffers["feature_scale"] = scale.clone()

    # --------------------------------------------------------------- covariance
    def forward(
        self,
        x1: Tensor,
        x2: Tensor,
        diag: bool = False,
        last_dim_is_batch: bool = False,
        *,
        same_samples: bool | None = None,
        **params,
    ) -> LinearOperator | Tensor:
        r"""The GPX covariance between the samples of ``x1`` and those of ``x2`` (see the class docstring).

        :param same_samples: Whether row :math:`i` of ``x1`` and row :math:`i` of ``x2`` are the same sample, so
            that :math:`\sigma_w^2\|\mathbf z_i\|^2` is added at :math:`(i, i)`. ``None`` (default): when
            ``x1`` and ``x2`` are equal (same shape and values, ``torch.equal``), GPyTorch's convention
            (``Kernel.covar_dist``'s ``x1_eq_x2``), except that rows at different positions of one tensor are
            different samples (same storage and strides, storage offsets a nonzero number of rows apart, e.g.
            ``x1 = full[n:]``, ``x2 = full[:n]``): this is how ``ExactGP`` slices its joint train/test covariance.
            ``False``: a cross-covariance between two sets of samples,
            whatever their values. ``True``: the joint covariance (``x1`` and ``x2`` must then be equal).
            Through ``Kernel.__call__`` it is a keyword: ``kernel(x, x, same_samples=False)``.
        :return: A ``LinearOperator`` (the diagonal as a ``Tensor`` when ``diag=True``).
        """
        if last_dim_is_batch:
            raise NotImplementedError("GPXKernel does not support last_dim_is_batch.")
        same = self._same_samples(x1, x2, same_samples)
        if same and same_samples is None and not diag and self.active_dims is not None:
            self._warn_if_copied(x1, x2)
        xx1, z1 = self.split_inputs(x1)
        xx2, z2 = (xx1, z1) if same else self.split_inputs(x2)
        if isinstance(self.base_kernel, InducingPointKernel):
            return self._inducing_call(xx1, z1, xx2, z2, same, diag)
        if explain_settings.use_grid_features.on() and supports_grid_features(self.base_kernel):
            res = self._grid_call(xx1, z1, xx2, z2, same, diag)
            if res is not None:
                return res
        grid_op = self._grid_operator(xx1, None if same else xx2)
        if grid_op is None:
            self._warn_gpytorch_grid_operator()
        if diag:
            if grid_op is not None:
                base_diag = grid_op.diagonal()
            else:
                base_diag = to_dense(kernel_diag(self.base_kernel, xx1, xx2, **params))
            res = base_diag * (z1 * z2).sum(-1)
            return res + self.weight_noise * (z1 * z1).sum(-1) if same else res
        if grid_op is not None:
            base = grid_op
        else:
            # kept lazy (GPyTorch evaluates nested kernels eagerly inside ``evaluate_kernel``): the Hadamard operator
            # evaluates it in row blocks, so K (n x n) is never held whole next to the result
            with gsettings.lazily_evaluate_kernels(True):
                base = to_linear_operator(self.base_kernel(xx1, xx2, **params))
        res = LowRankHadamardLinearOperator(base, z1, z2)
        if same:
            res = _SampleDiagAddedLinearOperator(res, DiagLinearOperator(self.weight_noise * (z1 * z1).sum(-1)))
        return res

    @staticmethod
    def _same_samples(x1: Tensor, x2: Tensor, same_samples: bool | None) -> bool:
        """Resolve ``same_samples`` (see :meth:`forward`): ``None`` is value equality, except that rows at different
        positions of one tensor are different samples (:func:`_different_rows_of_one_buffer`)."""
        if same_samples is None:
            return x1.shape == x2.shape and torch.equal(x1, x2) and not _different_rows_of_one_buffer(x1, x2)
        if not isinstance(same_samples, bool):
            raise TypeError(f"same_samples must be None, True or False, got {same_samples!r}.")
        if same_samples and not (x1.shape == x2.shape and torch.equal(x1, x2)):
            raise ValueError(
                "same_samples=True (the joint covariance of one set of samples) needs x1 and x2 equal in shape and "
                f"values; got shapes {tuple(x1.shape)} and {tuple(x2.shape)}"
                + ("" if x1.shape != x2.shape else " with different values")
                + ". Use same_samples=False for a cross-covariance."
            )
        return same_samples

    def _warn_if_copied(self, x1: Tensor, x2: Tensor) -> None:
        """Warn once when equal inputs arrive in two buffers while this kernel selects its own ``active_dims``.

        ``Kernel.__call__`` applies ``active_dims`` with ``index_select`` (a copy of each input), so the row positions
        that tell a cross-covariance between two equal sets of samples from the joint one are gone; inside an
        ``AdditiveKernel``/``ProductKernel`` this is what the test/train block of a prediction at the training
        inputs looks like (and also the joint block during training).
        """
        if getattr(self, "_warned_copies", False):
            return
        try:
            shared = x1.untyped_storage().data_ptr() == x2.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError, TypeError, AttributeError):  # no storage: nothing to tell
            return
        if shared:
            return
        self._warned_copies = True
        warnings.warn(
            f"GPXKernel with active_dims {self.active_dims.tolist()} got two equal inputs as separate copies "
            "(Kernel.__call__'s index_select), so it cannot tell one set of samples (the joint covariance, with "
            "sigma_w^2 ||z_i||^2 on the diagonal: assumed) from two equal sets of samples. Inside an AdditiveKernel "
            "or ProductKernel, ExactGP predictions at inputs equal to the training inputs would then wrongly carry "
            "that diagonal in the test/train block: predict there under "
            "gpytorch.settings.lazily_evaluate_kernels(False), or select the columns on the composite kernel "
            "instead of on the GPXKernel. Pass same_samples=True or False to the kernel call to silence this.",
            UserWarning,
            stacklevel=3,
        )

    def prediction_strategy(self, train_inputs, train_prior_dist, train_labels, likelihood):
        r"""GPyTorch's hook for ``ExactGP`` predictions: :class:`~gpytorch_explain.GPXPredictionStrategy`, which
        also keeps :math:`\sigma_w^2` out of the test/train block when the test inputs equal the training inputs.
        ``ScaleKernel`` and ``AdditiveStructureKernel`` delegate to it."""
        from ..models.gpx_prediction_strategy import GPXPredictionStrategy  # models import kernels

        return GPXPredictionStrategy(train_inputs, train_prior_dist, train_labels, likelihood)

    def _grid_operator(self, x1: Tensor, x2: Tensor | None) -> LinearOperator | None:
        """A multi-dimensional or product-structure KISS-GP base as the interpolation of its own base kernel
        (:func:`~gpytorch_explain.kernels.grid_operator`), for roots too wide for grid features; ``None`` when the
        base kernel's own operator is used (other kernels, or ``use_grid_features`` off)."""
        if not (explain_settings.use_grid_features.on() and supports_grid_features(self.base_kernel)):
            return None
        return grid_operator(self.base_kernel, x1, x2)

    def _warn_gpytorch_grid_operator(self) -> None:
        """Warn once when GPX multiplies by a GPyTorch KISS-GP operator that is not its base kernel's interpolation."""
        if not getattr(self, "_warned_product", False) and _has_product_structure(self.base_kernel):
            self._warned_product = True
            warnings.warn(
                "GPX is using GPyTorch's own ProductStructureKernel operator (grid features and GPX's product-grid "
                "operator are off or too large). That operator multiplies Lanczos roots of the per-dimension factors "
                "(rank <= gpytorch.settings.max_root_decomposition_size), and with an odd number of dimensions above "
                "gpytorch.settings.max_cholesky_size linear_operator 0.6 scales the whole product by rank/n: the "
                "covariance is then wrong. Prefer gpytorch_explain.settings.use_grid_features (on by default) with "
                "few dimensions, a coarser grid or longer lengthscales.",
                RuntimeWarning,
                stacklevel=3,
            )
        if not getattr(self, "_warned_grid_order", False) and gpytorch_grid_order_matters(self.base_kernel):
            self._warned_grid_order = True
            warnings.warn(
                "GPX is using GPyTorch's own multi-dimensional KISS-GP operator, which (gpytorch 1.15) multiplies the "
                "per-dimension grid Grams in the opposite order to its interpolation index: with grids or "
                "lengthscales that differ between dimensions it evaluates a different kernel. GPX's grid features "
                "and grid operator do not have this problem (gpytorch_explain.settings.use_grid_features).",
                RuntimeWarning,
                stacklevel=3,
            )

    def _inducing_call(self, x1: Tensor, z1: Tensor, x2: Tensor, z2: Tensor, same: bool, diag: bool):
        """The GPX covariance with an ``InducingPointKernel`` base (see the class docstring)."""
        ipk = self.base_kernel
        phi1 = inducing_features(ipk, x1)
        zz1 = z1.pow(2).sum(-1)
        if same:
            weight_diag = self.weight_noise * zz1
            sample_diag = weight_diag
            if self.training or gsettings.sgpr_diagonal_correction.on():
                exact = to_dense(kernel_diag(ipk.base_kernel, x1))
                trace = zz1 * (exact - phi1.pow(2).sum(-1)).clamp_min(0)
                if self.training:
                    term = GPXInducingPointAddedLossTerm(trace, weight_diag, ipk.likelihood)
                    ipk.update_added_loss_term("inducing_point_loss_term", term)
                else:
                    sample_diag = sample_diag + trace
            if diag:
                return phi1.pow(2).sum(-1) * zz1 + sample_diag
            return GPXInducingLinearOperator(phi1, z1, sample_diag.expand(phi1.shape[:-1]))
        phi2 = inducing_features(ipk, x2)
        if diag:
            return (phi1 * phi2).sum(-1) * (z1 * z2).sum(-1)
        return LowRankHadamardLinearOperator(MatmulLinearOperator(phi1, phi2.mT), z1, z2)

    def base_covariance(self, x1: Tensor, x2: Tensor | None = None) -> LinearOperator:
        r"""The base kernel :math:`k(\mathbf X_1, \mathbf X_2)` as this kernel uses it: through exact grid features
        (:math:`\boldsymbol\Phi_1\boldsymbol\Phi_2^\top`, one grid and one root) for a KISS-GP base when
        :class:`gpytorch_explain.settings.use_grid_features` applies, else the base kernel's own operator."""
        same = x2 is None
        if (
            explain_settings.use_grid_features.on()
            and supports_grid_features(self.base_kernel)
            and x1.dim() == 2
            and (same or x2.dim() == 2)
        ):
            d = self.z_dims if self.z_dims is not None else self.x_dims
            feats = grid_features(
                self.base_kernel, x1, x2, max_width=explain_settings.max_grid_feature_width.value() // d
            )
            if feats is not None:
                phi1, phi2 = feats
                return MatmulLinearOperator(phi1, (phi1 if same else phi2).mT)
            grid_op = grid_operator(self.base_kernel, x1, x2)
            if grid_op is not None:
                return grid_op
        return to_linear_operator(self.base_kernel(x1, x1 if same else x2))

    def _grid_call(self, x1: Tensor, z1: Tensor, x2: Tensor, z2: Tensor, same: bool, diag: bool):
        """The GPX covariance with a KISS-GP base through exact grid features, or ``None`` when the grid root is
        wider than ``gpytorch_explain.settings.max_grid_feature_width`` (or the inputs are batched)."""
        if x1.dim() != 2 or x2.dim() != 2:
            return None
        max_width = explain_settings.max_grid_feature_width.value() // z1.size(-1)
        feats = grid_features(self.base_kernel, x1, None if same else x2, max_width=max_width)
        wide = False
        if feats is None:
            # Too wide for Woodbury. Up to the dense limit, C is densified anyway: K = ΦΦᵀ from the untruncated-to-
            # tolerance root costs n²r, far less than densifying the interpolated grid operator.
            rows = max(x1.size(-2), x2.size(-2))
            if rows > max(gsettings.max_cholesky_size.value(), explain_settings.max_cholesky_size.value()):
                return None
            width = block_budget("dense_feature") // rows
            feats = grid_features(self.base_kernel, x1, None if same else x2, max_width=width)
            if feats is None:
                return None
            wide = True
        phi1, phi2 = feats
        if wide:
            if diag:
                if same:
                    return (phi1.pow(2).sum(-1) + self.weight_noise) * z1.pow(2).sum(-1)
                return (phi1 * phi2).sum(-1) * (z1 * z2).sum(-1)
            base = MatmulLinearOperator(phi1, (phi1 if same else phi2).mT)
            res = LowRankHadamardLinearOperator(base, z1, z1 if same else z2)
            if same:
                res = _SampleDiagAddedLinearOperator(res, DiagLinearOperator(self.weight_noise * z1.pow(2).sum(-1)))
            return res
        if same:
            sample_diag = self.weight_noise * z1.pow(2).sum(-1)
            if diag:
                return phi1.pow(2).sum(-1) * z1.pow(2).sum(-1) + sample_diag
            return GPXInducingLinearOperator(phi1, z1, sample_diag.expand(phi1.shape[:-1]))
        if diag:
            return (phi1 * phi2).sum(-1) * (z1 * z2).sum(-1)
        return LowRankHadamardLinearOperator(MatmulLinearOperator(phi1, phi2.mT), z1, z2)

    def num_outputs_per_input(self, x1: Tensor, x2: Tensor) -> int:
        return 1
