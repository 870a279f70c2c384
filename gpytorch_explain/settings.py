#!/usr/bin/env python3
r"""Settings of gpytorch-explain, used like ``gpytorch.settings`` (as context managers).

Every setting is built on GPyTorch's own setting classes (imported through ``gpytorch_explain._compat``):

* on/off switches are ``gpytorch.settings._feature_flag``\ s (:class:`use_grid_features`, :class:`check_memory`),
  read with ``.on()``;
* plain values are ``gpytorch.settings._value_context``\ s (:class:`max_cholesky_size`,
  :class:`dense_memory_budget`, :class:`max_grid_feature_width`, :class:`scale_warning_range`,
  :class:`max_block_elements`), read with ``.value()``;
* dtype-dependent tolerances are ``gpytorch.settings._dtype_value_context``\ s with one default per dtype
  (:class:`solve_tolerance`, :class:`max_cg_residual`, :class:`grid_root_tolerance`), read with ``.value(dtype)``
  (``bfloat16`` reads the ``half`` value). ``with solve_tolerance(1e-6):`` sets one value for every dtype;
  ``with solve_tolerance(float_value=1e-5, double_value=1e-10):`` sets them per dtype, and ``solve_tolerance(None)``
  restores the per-dtype defaults inside the block.

Example:
    >>> import gpytorch_explain
    >>> with gpytorch_explain.settings.max_cholesky_size(0):
    ...     gpytorch_explain.settings.max_cholesky_size.value()
    0
"""

from __future__ import annotations

import torch

from ._compat import _dtype_value_context, _feature_flag, _value_context

__all__ = [
    "max_cholesky_size",
    "dense_memory_budget",
    "dense_budget_bytes",
    "solve_tolerance",
    "derived_solve_tolerance",
    "cg_iterations",
    "max_cg_residual",
    "cg_residual_limit",
    "use_grid_features",
    "max_grid_feature_width",
    "grid_root_tolerance",
    "grid_root_threshold",
    "check_memory",
    "scale_warning_range",
    "max_block_elements",
    "block_budget",
]

_UNSET = object()


class _dtype_setting(_dtype_value_context):
    r"""A ``_dtype_value_context`` whose single positional value applies to every dtype.

    ``cls(value)`` sets ``value`` for float, double and half (``None``: the per-dtype defaults);
    ``cls(float_value=..., double_value=..., half_value=...)`` sets them one by one (an omitted one keeps its
    current value). ``value(dtype)`` accepts a dtype or a tensor; ``bfloat16`` reads the half value and any other
    dtype the double value.
    """

    _default_float_value: float = 0.0
    _default_double_value: float = 0.0
    _default_half_value: float = 0.0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._global_float_value = cls._default_float_value
        cls._global_double_value = cls._default_double_value
        cls._global_half_value = cls._default_half_value

    @classmethod
    def value(cls, dtype):
        if torch.is_tensor(dtype):
            dtype = dtype.dtype
        if dtype == torch.bfloat16:
            dtype = torch.half
        elif dtype not in (torch.float, torch.half):
            dtype = torch.double
        return super().value(dtype)

    def __init__(self, value=_UNSET, *, float_value=None, double_value=None, half_value=None):
        if value is not _UNSET:
            if float_value is not None or double_value is not None or half_value is not None:
                name = type(self).__name__
                raise ValueError(f"{name}: pass one value for every dtype or per-dtype values, not both.")
            if value is None:
                float_value, double_value, half_value = (
                    self._default_float_value,
                    self._default_double_value,
                    self._default_half_value,
                )
            else:
                float_value = double_value = half_value = float(value)
        super().__init__(float_value=float_value, double_value=double_value, half_value=half_value)


class max_cholesky_size(_value_context):
    r"""Largest :math:`n` for which GPX always factorises :math:`\mathbf C` densely (default 5000); set explicitly,
    also the largest for which its predictions do.

    Derived quantities (the mean cache :math:`\mathbf C^{-1}\mathbf y`, the latent predictive
    covariance and the weight posterior) are exact through one Cholesky factor of the
    :math:`n \times n` matrix :math:`\mathbf C` when :math:`n` is at most
    ``max(gpytorch.settings.max_cholesky_size, this)``; the weight covariance needs
    :math:`md` right-hand sides, for which a direct factorisation beats CG by far. :meth:`GPXModel.fit` uses the
    same threshold (L-BFGS needs a deterministic objective), and above it GPyTorch's CG/Lanczos.

    Predictions above that size: while this setting is at its default (no ``with max_cholesky_size(...)`` block is
    active), GPX keeps the dense factor as long as it fits :class:`dense_memory_budget` (see
    :func:`gpytorch_explain.utils.uses_dense_path`), and uses CG solves (exact to
    :class:`solve_tolerance`; LOVE under ``gpytorch.settings.fast_pred_var()``) beyond. Inside a
    ``with max_cholesky_size(k):`` block, ``k`` is a hard cap: predictions above ``max(gpytorch's, k)`` rows use the
    iterative path whatever the memory.

    Example:
        >>> from gpytorch_explain.settings import max_cholesky_size
        >>> max_cholesky_size.value(), max_cholesky_size.is_set()
        (5000, False)
        >>> with max_cholesky_size(0):
        ...     max_cholesky_size.value(), max_cholesky_size.is_set()
        (0, True)
    """

    _global_value = 5000
    _set_explicitly = False

    def __init__(self, value):
        super().__init__(value)
        self._orig_set = type(self)._set_explicitly

    def __enter__(self):
        super().__enter__()
        type(self)._set_explicitly = True

    def __exit__(self, *args):
        type(self)._set_explicitly = self._orig_set
        return super().__exit__(*args)

    @classmethod
    def is_set(cls) -> bool:
        """Whether a ``with max_cholesky_size(...)`` block is active (the value is then a hard cap)."""
        return cls._set_explicitly


class dense_memory_budget(_value_context):
    r"""Bytes GPX's dense prediction path may use above :class:`max_cholesky_size` (default ``None``: half the
    memory free on the training data's device when the model's prediction caches are built).

    Above :class:`max_cholesky_size` (at its default), GPX predicts through one dense Cholesky factor of
    :math:`\mathbf C` (mean cache, latent covariance, exact per-point weight covariances, attributions) when
    :func:`gpytorch_explain.utils.dense_path_bytes` — one :math:`n \times n` buffer, in which :math:`\mathbf C` is
    built in row blocks and factorised in place, plus a few row blocks of :class:`max_block_elements` — is at most
    this budget, and through CG solves otherwise (LOVE under ``gpytorch.settings.fast_pred_var()``). ``0`` turns
    the dense path above :class:`max_cholesky_size` off.

    The free memory (``None``) is read by :func:`gpytorch_explain.utils.available_memory`: on CUDA
    ``torch.cuda.mem_get_info``, on the CPU ``psutil`` when installed, else ``MemAvailable`` of ``/proc/meminfo``,
    else the free pages (``os.sysconf``); where none is known (other devices), the budget is
    ``DENSE_FALLBACK_BUDGET`` (1 GiB). The fraction is ``DENSE_MEMORY_FRACTION`` (0.5).

    Example:
        >>> from gpytorch_explain.settings import dense_memory_budget, dense_budget_bytes
        >>> with dense_memory_budget(2**30):
        ...     dense_budget_bytes("cpu")
        1073741824.0
    """

    _global_value = None

    @classmethod
    def _set_value(cls, value):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise ValueError(f"dense_memory_budget must be None or a number of bytes >= 0, got {value!r}.")
        cls._global_value = value


#: The fraction of the free device memory the dense prediction path may use by default (see
#: :class:`dense_memory_budget`).
DENSE_MEMORY_FRACTION = 0.5

#: The budget of :class:`dense_memory_budget` (``None``) where the free memory is unknown.
DENSE_FALLBACK_BUDGET = 2**30


def dense_budget_bytes(device=None, free: int | None = None) -> float:
    """The bytes :class:`dense_memory_budget` allows on ``device``: its value, or (``None``)
    ``DENSE_MEMORY_FRACTION`` of ``free`` (default: the device's free memory now, see
    :func:`gpytorch_explain.utils.available_memory`; ``DENSE_FALLBACK_BUDGET`` when unknown)."""
    value = dense_memory_budget.value()
    if value is not None:
        return float(value)
    if free is None:
        from .utils.memory import available_memory

        free = available_memory(device)
    if free is None:
        return float(DENSE_FALLBACK_BUDGET)
    return DENSE_MEMORY_FRACTION * float(free)


class solve_tolerance(_dtype_setting):
    r"""Relative CG residual for GPX's derived solves when CG is used (defaults: 1e-8 in float64, 1e-4 in
    float32 and half; never looser than ``gpytorch.settings.eval_cg_tolerance``, see
    :func:`derived_solve_tolerance`).

    The local weights :math:`\mathbb E[\mathbf w_*] = \mathbf B^\top\mathbf C^{-1}\mathbf y` inherit
    solve errors that are harmless for the predictive mean: GPyTorch's default evaluation
    tolerance (1e-2) left errors of a few percent in them. ``solve_tolerance(tol)`` sets ``tol`` for every dtype.

    Example:
        >>> import torch
        >>> from gpytorch_explain.settings import solve_tolerance
        >>> solve_tolerance.value(torch.float64), solve_tolerance.value(torch.float32)
        (1e-08, 0.0001)
        >>> with solve_tolerance(1e-6):
        ...     solve_tolerance.value(torch.float64), solve_tolerance.value(torch.float32)
        (1e-06, 1e-06)
        >>> with solve_tolerance(double_value=1e-10):
        ...     solve_tolerance.value(torch.float64), solve_tolerance.value(torch.float32)
        (1e-10, 0.0001)
    """

    _default_float_value = 1e-4
    _default_double_value = 1e-8
    _default_half_value = 1e-4


def derived_solve_tolerance(dtype) -> float:
    """The CG tolerance GPX uses for derived solves in ``dtype`` (see :class:`solve_tolerance`):
    :math:`\\min(\\text{solve\\_tolerance}(\\text{dtype}), \\text{eval\\_cg\\_tolerance})`."""
    from gpytorch import settings as gsettings

    return min(solve_tolerance.value(dtype), gsettings.eval_cg_tolerance.value())


def cg_iterations(size: int) -> int:
    """CG iterations GPX allows for a derived solve of size ``size`` (at least ``2 * size``)."""
    from gpytorch import settings as gsettings

    return max(gsettings.max_cg_iterations.value(), 2 * int(size))


class max_cg_residual(_dtype_setting):
    r"""Largest relative residual :math:`\|\mathbf C\mathbf x - \mathbf b\| / \|\mathbf b\|` a derived CG solve may
    end with before :class:`~gpytorch_explain.errors.ConvergenceError` is raised (defaults: 1e-4 in float64, 1e-2
    in float32 and half).

    CG aims at :class:`solve_tolerance` but may stall near it (finite precision) or stop at its
    iteration cap; a stall a few orders above the target is harmless, a failure is not.
    ``max_cg_residual(r)`` sets ``r`` for every dtype.
    """

    _default_float_value = 1e-2
    _default_double_value = 1e-4
    _default_half_value = 1e-2


def cg_residual_limit(dtype) -> float:
    """The residual above which a derived CG solve in ``dtype`` counts as failed (see :class:`max_cg_residual`)."""
    return max_cg_residual.value(dtype)


class use_grid_features(_feature_flag):
    r"""Whether GPX treats a KISS-GP base kernel through exact grid features (default on).

    A KISS-GP kernel is :math:`\mathbf K = \mathbf W\mathbf K_{UU}\mathbf W^\top` (sparse interpolation
    :math:`\mathbf W`, Kronecker grid Gram :math:`\mathbf K_{UU}`). With the eigendecomposition of each
    Kronecker factor, :math:`\mathbf K_{UU} = \mathbf S\mathbf S^\top` up to the eigenvalues below
    :class:`grid_root_tolerance`, so :math:`\mathbf K = \boldsymbol\Phi\boldsymbol\Phi^\top` with
    :math:`\boldsymbol\Phi = \mathbf W\mathbf S` (``n x r``), and GPX solves, log-determinants and weight
    posteriors are exact by Woodbury, as with an inducing-point base (see
    :func:`gpytorch_explain.kernels.grid_features`). ``ProductStructureKernel`` over a one-dimensional grid is
    the KISS-GP on the product grid and is treated the same way. When the root is wider than
    :class:`max_grid_feature_width` (short lengthscales, 3-D grids), GPX densifies :math:`\mathbf K =
    \boldsymbol\Phi\boldsymbol\Phi^\top` from the untruncated root up to the dense limit, and above it uses the
    lazy Hadamard operator over its own interpolated grid operator
    (:func:`gpytorch_explain.kernels.grid_operator`) with CG/Lanczos. With this setting off, GPX uses the lazy
    operator over GPyTorch's own interpolated operator (misordered for multi-dimensional grids whose dimensions
    differ, gpytorch 1.15.2; GPX warns).

    Example:
        >>> from gpytorch_explain.settings import use_grid_features
        >>> use_grid_features.on()
        True
        >>> with use_grid_features(False):
        ...     use_grid_features.on()
        False
    """

    _default = True


class max_grid_feature_width(_value_context):
    r"""Largest :math:`d\,r` (explanation features times grid-root rank) for which GPX uses exact grid
    features with a KISS-GP base kernel (default 4096; see :class:`use_grid_features`).

    The Woodbury capacitance is :math:`dr \times dr`; one likelihood evaluation costs
    :math:`O(n d^2 r^2 + d^3 r^3)`.
    """

    _global_value = 4096


class grid_root_tolerance(_dtype_setting):
    r"""Relative eigenvalue below which the grid Gram's eigenpairs are dropped from the grid root
    (defaults: 1e-12 in float64, 1e-6 in float32 and half; see :class:`use_grid_features`).

    An eigenpair of :math:`\mathbf K_{UU}` is kept when its eigenvalue exceeds this fraction of the
    largest. What is dropped changes each kernel entry by at most the tolerance times the largest
    eigenvalue, far below the noise of any GPX model. ``grid_root_tolerance(t)`` sets ``t`` for every dtype.
    """

    _default_float_value = 1e-6
    _default_double_value = 1e-12
    _default_half_value = 1e-6


def grid_root_threshold(dtype) -> float:
    """The relative eigenvalue cut of the grid root in ``dtype`` (see :class:`grid_root_tolerance`)."""
    return grid_root_tolerance.value(dtype)


class check_memory(_feature_flag):
    r"""Whether GPX estimates the memory of a dense or iterative path over the :math:`n \times n` covariance
    before it starts, and raises ``MemoryError`` (warns above half) when the machine does not have it
    (default on; see :func:`gpytorch_explain.utils.check_memory`)."""

    _default = True


class scale_warning_range(_value_context):
    r"""Range ``(low, high)`` of column standard deviations of :math:`\mathbf x`, :math:`\mathbf z` and
    :math:`\mathbf y` outside which :class:`~gpytorch_explain.GPXModel` warns that the data are far from unit
    scale (default ``(0.1, 10)``); ``y`` also warns when :math:`|\bar y| > 3\,\mathrm{std}(y)` (an offset the
    zero-mean model cannot explain). ``None`` turns the warnings off.

    The GPX prior starts at unit output scale and :math:`\sigma_w^2 = \sigma_y^2 = 0.01`: a column of
    :math:`\mathbf z` with std :math:`10^{-2}` needs weights of order :math:`10^2`, far in the prior's tail,
    and L-BFGS did not get there (:math:`\mathbf x = \mathbf z` scaled by :math:`10^{-3}`: test :math:`R^2` 0.004
    instead of 0.999; one column scaled by :math:`10^{-2}` lost its contribution).
    """

    _global_value = (0.1, 10.0)


class max_block_elements(_value_context):
    r"""The one memory setting: the element budget of every chunked computation (default :math:`2^{24}`).

    Every computation that goes in chunks (blocks of rows, of points, of columns) or that picks a lower-memory
    path above a size reads its budget from this setting *at call time*, as a fixed multiple or fraction of it
    (:func:`block_budget`; at least 1). The factors keep the default behaviour identical to the constants the
    sites had before they were folded into this setting. With :math:`B` this value (:math:`2^{24}` entries by
    default, 128 MiB in float64, 64 MiB in float32):

    ======================================  =======  ==============  =========  =========  ==========================
    site (:func:`block_budget` key)         factor   default         float64    float32    what it bounds
    ======================================  =======  ==============  =========  =========  ==========================
    ``partitioned_kernel``                  1        :math:`2^{24}`  128 MiB    64 MiB     kernel block ``b N batch``
    ``attribution_points``                  1        :math:`2^{24}`  128 MiB    64 MiB     derived cross-cov. chunk
    ``sgpr_train_rows``                     1/4      :math:`2^{22}`  32 MiB     16 MiB     SGPR training-row chunk
    ``fallback_batched``                    2        :math:`2^{25}`  256 MiB    128 MiB    batched autograd Hessians
    ``kernel_derivative_block``             1/2      :math:`2^{23}`  64 MiB     32 MiB     ``block_size`` default
    ``rbf_moments``                         1/4      :math:`2^{22}`  32 MiB     16 MiB     RBF moment chunk
    ``weight_root_z``                       2        :math:`2^{25}`  256 MiB    128 MiB    root R Z (size)
    ``block_posterior``                     1/4      :math:`2^{22}`  32 MiB     16 MiB     point chunk
    ``gpx_inducing``                        1/4      :math:`2^{22}`  32 MiB     16 MiB     row chunk
    ``inducing_weight_posterior``           1/2      :math:`2^{23}`  64 MiB     32 MiB     point chunk
    ``dense_block``                         1/8      :math:`2^{21}`  16 MiB     8 MiB      identity-column block
    ``feature_block``                       1        :math:`2^{24}`  128 MiB    64 MiB     feature-row block
    ``dense_feature``                       4        :math:`2^{26}`  512 MiB    256 MiB    densified grid features
    ``grid_root_columns``                   1/64     :math:`2^{18}`  (columns)  (columns)  grid-root width
    ``operator_grid``                       1        :math:`2^{24}`  (points)   (points)   product grid points
    ``dense_rows``                          1/4      :math:`2^{22}`  32 MiB     16 MiB     row block of dense C
    ======================================  =======  ==============  =========  =========  ==========================

    Where each site is:

    * ``partitioned_kernel``: :class:`PartitionedKernelLinearOperator` computes :math:`\mathbf K\mathbf V` (and,
      in the backward pass, :math:`\partial\,\operatorname{tr}(\mathbf U^\top\mathbf K\mathbf V)/\partial
      \boldsymbol\theta`) over blocks of ``b`` rows of :math:`\mathbf K`, with ``b * N * prod(batch_shape)`` at
      most :math:`B` (at least one row); its working memory is a few such blocks plus the :math:`N \times t`
      right-hand side and result, so nothing :math:`N \times N` is ever stored;
    * ``attribution_points``: the point chunks of the attribution posteriors' derived cross-covariances
      (``attribution/_quadrature.py``, ``point_chunks``);
    * ``sgpr_train_rows``: the training-row chunks of the SGPR attribution sums (``attribution/sgpr.py``);
    * ``fallback_batched``: the batched autograd second derivatives of the fallback path
      (``attribution/fallback.py``);
    * ``kernel_derivative_block``: the default ``block_size`` of ``grad_cross`` / ``grad_joint`` /
      ``grad_point`` and the path-integral rules (``attribution/kernel_derivatives.py``, ``path_integrals.py``);
    * ``rbf_moments``: the RBF closed-form moments (``attribution/_rbf_moments.py``);
    * ``weight_root_z``: the largest :math:`\mathbf R\mathbf Z` root :class:`WeightPosteriorLinearOperator`
      forms (above it, the root is not formed);
    * ``block_posterior``, ``gpx_inducing``, ``inducing_weight_posterior``: the point/row chunks of
      ``BlockPosteriorLinearOperator``, ``GPXInducingLinearOperator`` and
      ``InducingWeightPosteriorLinearOperator``;
    * ``dense_block``: densifying an interpolated (KISS-GP) operator through blocks of identity columns
      (``LowRankHadamardLinearOperator``; at least 16 columns);
    * ``feature_block``: the row blocks of Nyström features (``kernels/gpx_kernel.py``) and of grid features
      (``operators/grid_interpolated_linear_operator.py``);
    * ``dense_feature``: the feature entries allowed when a grid root too wide for Woodbury is densified
      (``kernels/gpx_kernel.py``);
    * ``grid_root_columns`` and ``operator_grid``: the widest grid root
      :func:`~gpytorch_explain.kernels.grid_features` forms without ``max_width``, and the largest product grid
      :func:`~gpytorch_explain.kernels.grid_operator` builds densely
      (``kernels/ski_features.py``);
    * ``dense_rows``: the row blocks in which GPX's dense prediction path writes :math:`\mathbf C` into the one
      :math:`n \times n` buffer it factorises in place (:func:`gpytorch_explain.utils.dense_cholesky`).

    Larger budgets are faster on GPUs, smaller ones bound CPU memory tighter; results do not depend on it
    (up to floating-point summation order).

    Example:
        >>> from gpytorch_explain.settings import block_budget, max_block_elements
        >>> with max_block_elements(1000):
        ...     max_block_elements.value(), block_budget("sgpr_train_rows"), block_budget("weight_root_z")
        (1000, 250, 2000)
        >>> block_budget("sgpr_train_rows") == 2**22
        True
    """

    _global_value = 2**24

    @classmethod
    def _set_value(cls, value):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"max_block_elements must be a positive int, got {value!r}.")
        cls._global_value = value


#: ``site: (multiplier, divisor)`` of :class:`max_block_elements` (the table in its docstring).
_BUDGET_FACTORS: dict[str, tuple[int, int]] = {
    "partitioned_kernel": (1, 1),
    "attribution_points": (1, 1),
    "sgpr_train_rows": (1, 4),
    "fallback_batched": (2, 1),
    "kernel_derivative_block": (1, 2),
    "rbf_moments": (1, 4),
    "weight_root_z": (2, 1),
    "block_posterior": (1, 4),
    "gpx_inducing": (1, 4),
    "inducing_weight_posterior": (1, 2),
    "dense_block": (1, 8),
    "feature_block": (1, 1),
    "dense_feature": (4, 1),
    "grid_root_columns": (1, 64),
    "operator_grid": (1, 1),
    "dense_rows": (1, 4),
}


def block_budget(site: str) -> int:
    r"""The element budget of ``site``: :math:`\max(1, \lfloor B\,p / q \rfloor)` with :math:`B` the current
    :class:`max_block_elements` and :math:`(p, q)` the site's factor (see the table there)."""
    try:
        mul, div = _BUDGET_FACTORS[site]
    except KeyError:
        raise ValueError(f"Unknown block budget site {site!r}; known: {sorted(_BUDGET_FACTORS)}.") from None
    return max(1, max_block_elements.value() * mul // div)
