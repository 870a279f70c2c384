#!/usr/bin/env python3
"""Settings of gpytorch-explain, used like ``gpytorch.settings`` (as context managers).

Example:
    >>> import gpytorch_explain
    >>> with gpytorch_explain.settings.max_cholesky_size(0):
    ...     gpytorch_explain.settings.max_cholesky_size.value()
    0
"""

from __future__ import annotations

from gpytorch.settings import _value_context

__all__ = [
    "max_cholesky_size",
    "solve_tolerance",
    "derived_solve_tolerance",
    "max_cg_residual",
    "cg_residual_limit",
    "use_grid_features",
    "max_grid_feature_width",
    "grid_root_tolerance",
    "grid_root_threshold",
    "check_memory",
    "scale_warning_range",
    "max_block_elements",
]


class _setting:
    """A global value that a ``with`` block can change temporarily."""

    _global_value = None

    @classmethod
    def value(cls):
        return cls._global_value

    def __init__(self, value):
        self._value = value
        self._previous = None

    def __enter__(self):
        self._previous = type(self)._global_value
        type(self)._global_value = self._value
        return self

    def __exit__(self, *exc):
        type(self)._global_value = self._previous
        return False


class max_cholesky_size(_setting):
    r"""Largest :math:`n` for which GPX factorises :math:`\mathbf C` densely (default 5000).

    Derived quantities (the mean cache :math:`\mathbf C^{-1}\mathbf y`, the latent predictive
    covariance and the weight posterior) are exact through one Cholesky factor of the
    :math:`n \times n` matrix :math:`\mathbf C` when :math:`n` is at most
    ``max(gpytorch.settings.max_cholesky_size, this)``; the weight covariance needs
    :math:`md` right-hand sides, for which a direct factorisation beats CG by far. Above that
    size GPyTorch's iterative solvers (CG, Lanczos/LOVE) are used. :meth:`GPXModel.fit` uses the
    same threshold, since L-BFGS needs a deterministic objective.
    """

    _global_value = 5000


class solve_tolerance(_setting):
    r"""Relative CG residual for GPX's derived solves when CG is used (default ``None``: 1e-8
    in float64, 1e-4 in float32; never looser than ``gpytorch.settings.eval_cg_tolerance``).

    The local weights :math:`\mathbb E[\mathbf w_*] = \mathbf B^\top\mathbf C^{-1}\mathbf y` inherit
    solve errors that are harmless for the predictive mean: GPyTorch's default evaluation
    tolerance (1e-2) left errors of a few percent in them.
    """

    _global_value = None


def derived_solve_tolerance(dtype) -> float:
    """The CG tolerance GPX uses for derived solves in ``dtype`` (see :class:`solve_tolerance`)."""
    import torch
    from gpytorch import settings as gsettings

    tol = solve_tolerance.value()
    if tol is None:
        tol = 1e-4 if dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-8
    return min(tol, gsettings.eval_cg_tolerance.value())


def cg_iterations(size: int) -> int:
    """CG iterations GPX allows for a derived solve of size ``size`` (at least ``2 * size``)."""
    from gpytorch import settings as gsettings

    return max(gsettings.max_cg_iterations.value(), 2 * int(size))


class max_cg_residual(_setting):
    r"""Largest relative residual :math:`\|\mathbf C\mathbf x - \mathbf b\| / \|\mathbf b\|` a derived CG solve may
    end with before :class:`~gpytorch_explain.errors.ConvergenceError` is raised (default ``None``: 1e-4 in
    float64, 1e-2 in float32).

    CG aims at :class:`solve_tolerance` but may stall near it (finite precision) or stop at its
    iteration cap; a stall a few orders above the target is harmless, a failure is not.
    """

    _global_value = None


def cg_residual_limit(dtype) -> float:
    """The residual above which a derived CG solve in ``dtype`` counts as failed (see :class:`max_cg_residual`)."""
    import torch

    limit = max_cg_residual.value()
    if limit is None:
        limit = 1e-2 if dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-4
    return limit


class use_grid_features(_setting):
    r"""Whether GPX treats a KISS-GP base kernel through exact grid features (default ``True``).

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
    """

    _global_value = True

    @classmethod
    def on(cls) -> bool:
        return bool(cls._global_value)


class max_grid_feature_width(_setting):
    r"""Largest :math:`d\,r` (explanation features times grid-root rank) for which GPX uses exact grid
    features with a KISS-GP base kernel (default 4096; see :class:`use_grid_features`).

    The Woodbury capacitance is :math:`dr \times dr`; one likelihood evaluation costs
    :math:`O(n d^2 r^2 + d^3 r^3)`.
    """

    _global_value = 4096


class grid_root_tolerance(_setting):
    r"""Relative eigenvalue below which the grid Gram's eigenpairs are dropped from the grid root
    (default ``None``: 1e-12 in float64, 1e-6 in float32; see :class:`use_grid_features`).

    An eigenpair of :math:`\mathbf K_{UU}` is kept when its eigenvalue exceeds this fraction of the
    largest. What is dropped changes each kernel entry by at most the tolerance times the largest
    eigenvalue, far below the noise of any GPX model.
    """

    _global_value = None


def grid_root_threshold(dtype) -> float:
    """The relative eigenvalue cut of the grid root in ``dtype`` (see :class:`grid_root_tolerance`)."""
    import torch

    tol = grid_root_tolerance.value()
    if tol is None:
        tol = 1e-6 if dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-12
    return tol


class check_memory(_setting):
    r"""Whether GPX estimates the memory of a dense or iterative path over the :math:`n \times n` covariance
    before it starts, and raises ``MemoryError`` (warns above half) when the machine does not have it
    (default ``True``; see :func:`gpytorch_explain.utils.check_memory`)."""

    _global_value = True

    @classmethod
    def on(cls) -> bool:
        return bool(cls._global_value)


class scale_warning_range(_setting):
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
    r"""Largest number of kernel entries a partitioned kernel product builds at once (default :math:`2^{24}`).

    :class:`PartitionedKernelLinearOperator` computes :math:`\mathbf K\mathbf V` (and, in the backward
    pass, :math:`\partial\,\operatorname{tr}(\mathbf U^\top\mathbf K\mathbf V)/\partial\boldsymbol\theta`) over
    blocks of ``b`` rows of :math:`\mathbf K`, with ``b * N * prod(batch_shape)`` at most this value (at
    least one row). Its working memory is a few such blocks (the kernel's own intermediates, and their
    autograd graph in the backward pass) plus the :math:`N \times t` right-hand side and result, so nothing
    :math:`N \times N` is ever stored. The default is 128 MiB per block in float64 (64 MiB in float32);
    larger blocks are faster on GPUs, smaller ones bound CPU memory tighter.

    Example:
        >>> from gpytorch_explain.settings import max_block_elements
        >>> with max_block_elements(1000):
        ...     max_block_elements.value()
        1000
    """

    _global_value = 2**24

    @classmethod
    def _set_value(cls, value):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"max_block_elements must be a positive int, got {value!r}.")
        cls._global_value = value
