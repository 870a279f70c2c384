#!/usr/bin/env python3
r"""Checks of a :class:`~gpytorch_explain.GPXModel`'s data and kernel: dimensions, scale and memory."""

from __future__ import annotations

import warnings

import torch
from gpytorch.kernels import (
    AdditiveStructureKernel,
    GridInterpolationKernel,
    InducingPointKernel,
    Kernel,
    ProductStructureKernel,
)
from torch import Tensor

from .. import settings as explain_settings
from ..kernels.partitioned_kernel import PartitionedKernel, keops_available
from ..utils import check_memory, dense_limit, dense_path_bytes, uses_dense_path

__all__ = [
    "check_base_kernel_dims",
    "warn_scale",
    "column_scale",
    "dense_memory_estimate",
    "is_lean_kernel",
    "MEMORY_ALTERNATIVES",
]

#: What to use instead of a path over the dense n x n covariance.
MEMORY_ALTERNATIVES = (
    "the memory-lean exact kernel (base_kernel=gpytorch_explain.kernels.PartitionedKernel(kernel): CG in row "
    "blocks, nothing n x n stored; predictions then factor C densely only where it fits "
    "gpytorch_explain.settings.dense_memory_budget), an inducing-point base kernel "
    "(gpytorch.kernels.InducingPointKernel, exact Woodbury, O(n d^2 M^2)), a KISS-GP base kernel "
    "(gpytorch.kernels.GridInterpolationKernel, grid features), or gpytorch_explain.VariationalGPXModel "
    "(minibatches); or fit the hyperparameters on a subset of rows."
)

#: n x n matrices alive at the peak of a dense/CG pass: kernel (and its intermediates), covariance, factor or CG
#: workspace; training keeps the autograd intermediates and their gradients as well.
DENSE_MATRICES_TRAINING = 8
DENSE_MATRICES_EVAL = 4


def check_base_kernel_dims(base_kernel: Kernel, x_dims: int) -> None:
    """Raise a ``ValueError`` naming the kernel when its dimensions cannot match ``x_dims`` columns of x.

    Checked: ``active_dims`` in range, ``ard_num_dims`` equal to the number of columns a kernel sees, inducing
    points with ``x_dims`` columns, and a KISS-GP grid with as many dimensions as its columns. Kernels inside an
    ``AdditiveStructureKernel``/``ProductStructureKernel`` (which see one column at a time) are not checked.
    """
    _check_dims(base_kernel, x_dims, "base_kernel")


def _check_dims(k: Kernel, columns: int, where_name: str) -> None:
    where = f"{where_name} ({type(k).__name__})"
    active = getattr(k, "active_dims", None)
    if active is not None and not isinstance(active, slice):
        active = torch.as_tensor(active)
        if active.numel() and (int(active.max()) >= columns or int(active.min()) < -columns):
            raise ValueError(
                f"{where} has active_dims {active.tolist()}, out of range for x with D = {columns} columns."
            )
        columns = int(active.numel())
    ard = getattr(k, "ard_num_dims", None)
    if ard is not None and ard > 1 and ard != columns:
        raise ValueError(f"{where} has ard_num_dims = {ard} but works on {columns} column(s) of x.")
    if isinstance(k, InducingPointKernel) and k.inducing_points.size(-1) != columns:
        raise ValueError(f"{where} has inducing points with {k.inducing_points.size(-1)} columns, but x has {columns}.")
    if isinstance(k, GridInterpolationKernel) and k.num_dims != columns:
        raise ValueError(f"{where} has a {k.num_dims}-D grid, but it sees {columns} column(s) of x.")
    if isinstance(k, (AdditiveStructureKernel, ProductStructureKernel)):
        return
    for name, child in k.named_children():
        if isinstance(child, Kernel):
            _check_dims(child, columns, f"{where_name}.{name}")
        elif isinstance(child, torch.nn.ModuleList):
            for i, sub in enumerate(child):
                if isinstance(sub, Kernel):
                    _check_dims(sub, columns, f"{where_name}.{name}[{i}]")


def column_scale(t: Tensor) -> Tensor:
    """Column standard deviations of ``t`` (``(n, c)``), with 1 for constant columns (and for n < 2)."""
    if t.size(0) < 2:
        return torch.ones(t.size(-1), dtype=t.dtype, device=t.device)
    std = t.std(dim=0)
    return torch.where(std > 0, std, torch.ones_like(std))


def _fmt(values) -> str:
    return ", ".join(f"{v:.3g}" for v in values)


def warn_scale(x: Tensor, z: Tensor | None, y: Tensor, standardize_x: bool, standardize_y: bool) -> None:
    r"""Warn, with the numbers, when columns of :math:`\mathbf x`/:math:`\mathbf z` or :math:`\mathbf y` are far
    from unit scale (see :class:`gpytorch_explain.settings.scale_warning_range`) and no standardisation covers
    them."""
    bounds = explain_settings.scale_warning_range.value()
    if bounds is None or x.size(0) < 2:
        return
    low, high = bounds
    problems = []
    checks = [] if standardize_x else [("x", x)] + ([] if z is None else [("z", z)])
    for name, t in checks:
        std = t.detach().std(dim=0)
        bad = ((std < low) & (std > 0)) | (std > high)
        if bad.any():
            cols = bad.nonzero().flatten().tolist()
            problems.append(f"{name} columns {cols} have std {_fmt(std[bad].tolist())}")
    if not standardize_y:
        mean, std = y.detach().mean().item(), y.detach().std().item()
        if (std > 0 and (std < low or std > high)) or abs(mean) > 3 * std:
            problems.append(f"y has mean {mean:.4g} and std {std:.4g}")
    if problems:
        warnings.warn(
            "GPXModel: data far from unit scale (" + "; ".join(problems) + f", outside [{low:g}, {high:g}] or "
            "|mean(y)| > 3 std(y)). GPX's prior (zero mean, unit output scale, sigma_w^2 = sigma_y^2 = 0.01) then "
            "fits poorly (e.g. x scaled by 1e-3 gave test R^2 0.004 instead of 0.999). Pass standardize_x=True "
            "and/or standardize_y=True (kept with the model and undone in every output), or standardise the data "
            "yourself.",
            UserWarning,
            stacklevel=3,
        )


def dense_memory_estimate(n: int, itemsize: int, training: bool) -> float:
    r"""Bytes of the dense/CG path over the :math:`n\times n` GPX covariance:
    ``DENSE_MATRICES_TRAINING`` (fit) or ``DENSE_MATRICES_EVAL`` (predictions) :math:`n\times n` matrices."""
    count = DENSE_MATRICES_TRAINING if training else DENSE_MATRICES_EVAL
    return float(count) * n * n * itemsize


def is_lean_kernel(kernel: Kernel) -> bool:
    """Whether ``kernel`` never stores its :math:`n \times n` matrix: a
    :class:`~gpytorch_explain.kernels.PartitionedKernel`, or a ``gpytorch.kernels.keops`` kernel (optionally in a
    ``ScaleKernel``) when pykeops is importable."""
    if isinstance(kernel, PartitionedKernel):
        return True
    if not keops_available():
        return False
    from gpytorch.kernels import ScaleKernel
    from gpytorch.kernels.keops.keops_kernel import KeOpsKernel

    inner = kernel.base_kernel if type(kernel) is ScaleKernel else kernel
    return isinstance(inner, KeOpsKernel)


def check_dense_memory(
    n: int, dtype: torch.dtype, device, training: bool, what: str, lean: bool = False, batch_numel: int = 1
) -> None:
    """:func:`gpytorch_explain.utils.check_memory` with the path's estimate and the GPX alternatives.

    Training: the dense/CG path over the covariance, :func:`dense_memory_estimate` (nothing with a ``lean`` base
    kernel above :func:`~gpytorch_explain.utils.dense_limit`, where CG runs in row blocks). Predictions: the dense
    factor's :func:`~gpytorch_explain.utils.dense_path_bytes` where :func:`~gpytorch_explain.utils.uses_dense_path`,
    else nothing for a ``lean`` base and :func:`dense_memory_estimate` (the kernel matrix CG multiplies) otherwise.
    """
    itemsize = torch.finfo(dtype).bits // 8
    if training:
        if lean and n > dense_limit():
            return
        required = dense_memory_estimate(n, itemsize, True) * batch_numel
        path = "the dense/CG path"
    elif uses_dense_path(n, dtype, device, batch_numel):
        required = dense_path_bytes(n, dtype, batch_numel)
        path = "the dense Cholesky path"
    elif lean:
        return
    else:
        required = dense_memory_estimate(n, itemsize, False) * batch_numel
        path = "the CG path over the dense kernel matrix"
    check_memory(required, device, f"{what} with n = {n} rows on {path}", MEMORY_ALTERNATIVES)
