#!/usr/bin/env python3
r"""Wrap any GPyTorch kernel so that its covariance is never stored: products in row blocks (or KeOps)."""

from __future__ import annotations

import importlib.util
from typing import Any

import gpytorch
import torch
from gpytorch.kernels import Kernel, MaternKernel, PeriodicKernel, RBFKernel, ScaleKernel
from linear_operator import to_dense
from linear_operator.operators import LinearOperator
from torch import Tensor

from ..operators.partitioned_kernel_linear_operator import PartitionedKernelLinearOperator, max_block_elements
from ..utils.gp import kernel_diag

__all__ = ["PartitionedKernel", "KernelCovarFunc", "max_block_elements", "keops_available"]


def keops_available() -> bool:
    """Whether ``pykeops`` can be imported (then :class:`PartitionedKernel` hands RBF, Matérn and periodic
    kernels to ``gpytorch.kernels.keops``)."""
    return importlib.util.find_spec("pykeops") is not None


class KernelCovarFunc:
    r"""``covar_func`` of a :class:`PartitionedKernelLinearOperator` that evaluates a kernel *module* with
    its hyperparameters passed in as tensors.

    ``KernelCovarFunc(kernel)(x1, x2, p0=..., p1=...)`` is ``kernel(x1, x2)`` evaluated (not lazily) with
    the kernel's parameters ``kernel.named_parameters()`` replaced by ``p0, p1, ...``
    (``torch.func.functional_call``). The operator holds the parameters in its representation, so
    linear_operator's backward routes gradients to them (a ``covar_func`` that closed over the module
    would lose them); constraints, priors' transforms and ``active_dims`` are the module's own.
    """

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.names = tuple(name for name, _ in kernel.named_parameters())

    def params(self) -> tuple[dict[str, Tensor], dict[str, int]]:
        """The parameters as keyword tensors ``p0, p1, ...`` and their numbers of non-batch dimensions
        (those beyond the batch shape of the kernel that owns them)."""
        tensors, nonbatch = {}, {}
        for i, (name, value) in enumerate(self.kernel.named_parameters()):
            owner = self.kernel.get_submodule(name.rpartition(".")[0]) if "." in name else self.kernel
            num_batch = len(owner.batch_shape) if isinstance(owner, Kernel) else 0
            tensors[f"p{i}"] = value
            nonbatch[f"p{i}"] = max(0, value.dim() - num_batch)
        return tensors, nonbatch

    def _values(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        return {name: params[f"p{i}"] for i, name in enumerate(self.names)}

    def __call__(self, x1: Tensor, x2: Tensor, **params: Tensor) -> Tensor:
        with gpytorch.settings.lazily_evaluate_kernels(False):
            return to_dense(torch.func.functional_call(self.kernel, self._values(params), (x1, x2)))

    def diag(self, x1: Tensor, x2: Tensor, **params: Tensor) -> Tensor:
        with gpytorch.settings.lazily_evaluate_kernels(False):
            res = torch.func.functional_call(self.kernel, self._values(params), (x1, x2), {"diag": True})
        return to_dense(res)


class PartitionedKernel(Kernel):
    r"""Any GPyTorch kernel, with a covariance that is never stored :math:`N \times N`.

    ``PartitionedKernel(base)(x1, x2)`` represents the same matrix :math:`k(\mathbf X_1, \mathbf X_2)` as
    ``base(x1, x2)``, as a :class:`~gpytorch_explain.operators.PartitionedKernelLinearOperator`: products
    :math:`\mathbf K\mathbf V` and the bilinear derivative of the backward pass (with respect to all of ``base``'s
    hyperparameters and to the inputs) run over row blocks of at most
    :class:`~gpytorch_explain.settings.max_block_elements` entries, built on the fly, so memory is :math:`O(N(t+b))`
    rather than :math:`O(N^2)`. This is GPyTorch's partitioned-kernel idea (Wang et al., 2019) for any kernel. The
    diagonal comes from ``base(x, diag=True)``, and single entries cost one kernel evaluation each, so the
    pivoted-Cholesky preconditioner of CG does not densify it. Use it for exact GPs, GPX models
    (``GPXModel(x, y, base_kernel=PartitionedKernel(...))``) and attribution GPs above the dense limit, together with
    ``gpytorch.settings.max_cholesky_size`` so that nothing densifies the matrix (below that size GPyTorch's Cholesky
    path calls ``to_dense``, which still works).

    When ``pykeops`` is importable and ``gpytorch.settings.use_keops`` is on, a base that is exactly
    ``RBFKernel``, ``MaternKernel`` or ``PeriodicKernel`` (optionally inside ``ScaleKernel``) is evaluated
    by the corresponding ``gpytorch.kernels.keops`` kernel's forward instead (same hyperparameters);
    everything else uses the partitioned operator.

    :param base_kernel: The kernel :math:`k` (single output per input).

    Example:
        >>> import torch, gpytorch
        >>> from gpytorch_explain.kernels import PartitionedKernel
        >>> base = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=2)).double()
        >>> x = torch.randn(30, 2, dtype=torch.float64)
        >>> lean = PartitionedKernel(base)
        >>> v = torch.randn(30, 2, dtype=torch.float64)
        >>> torch.allclose(lean(x) @ v, base(x).to_dense() @ v)
        True
    """

    def __init__(self, base_kernel: Kernel, **kwargs: Any):
        if not isinstance(base_kernel, Kernel):
            raise TypeError(f"base_kernel must be a gpytorch Kernel, got {type(base_kernel).__name__}.")
        kwargs.setdefault("batch_shape", base_kernel.batch_shape)
        super().__init__(**kwargs)
        self.base_kernel = base_kernel

    @property
    def batch_shape(self) -> torch.Size:
        """The base kernel's batch shape. The wrapper has no hyperparameters, and ``kernel[i]`` / ``expand_batch``
        (which update a kernel's batch shape from its own parameters only) act on the base kernel."""
        base = self._modules.get("base_kernel")
        return self._batch_shape if base is None else base.batch_shape

    @batch_shape.setter
    def batch_shape(self, value: torch.Size) -> None:
        self._batch_shape = torch.Size(value)

    @property
    def is_stationary(self) -> bool:
        return self.base_kernel.is_stationary

    def num_outputs_per_input(self, x1: Tensor, x2: Tensor) -> int:
        return self.base_kernel.num_outputs_per_input(x1, x2)

    def forward(
        self, x1: Tensor, x2: Tensor, diag: bool = False, last_dim_is_batch: bool = False, **params: Any
    ) -> Tensor | LinearOperator:
        if last_dim_is_batch:
            raise NotImplementedError("PartitionedKernel does not support last_dim_is_batch.")
        if params:
            raise TypeError(f"PartitionedKernel got unexpected kernel keyword arguments {sorted(params)}.")
        if diag:
            return to_dense(kernel_diag(self.base_kernel, x1, x2))
        outputs = self.base_kernel.num_outputs_per_input(x1, x2)
        if outputs != 1:
            raise NotImplementedError(
                f"PartitionedKernel supports kernels with one output per input; {type(self.base_kernel).__name__} "
                f"has {outputs}."
            )
        keops = _keops_operator(self.base_kernel, x1, x2)
        if keops is not None:
            return keops
        func = KernelCovarFunc(self.base_kernel)
        tensors, nonbatch = func.params()
        return PartitionedKernelLinearOperator(x1, x2, covar_func=func, num_nonbatch_dimensions=nonbatch, **tensors)


def _keops_operator(kernel: Kernel, x1: Tensor, x2: Tensor) -> LinearOperator | None:
    """The KeOps operator of ``gpytorch.kernels.keops`` for a plain RBF / Matérn / periodic base (optionally
    scaled), or ``None`` (pykeops missing, ``use_keops`` off, active dimensions or another kernel).

    Not exercised by the test suite where pykeops is not installed.
    """
    if not (keops_available() and gpytorch.settings.use_keops.on()):
        return None
    from gpytorch.kernels import keops

    inner, scale = (kernel.base_kernel, kernel) if type(kernel) is ScaleKernel else (kernel, None)
    classes = {RBFKernel: keops.RBFKernel, MaternKernel: keops.MaternKernel, PeriodicKernel: keops.PeriodicKernel}
    keops_cls = classes.get(type(inner))
    if keops_cls is None or inner.active_dims is not None or (scale is not None and scale.active_dims is not None):
        return None
    res = keops_cls.forward(inner, x1.contiguous(), x2.contiguous())
    if scale is not None:
        outputscale = scale.outputscale
        res = res.mul(outputscale.view(*outputscale.shape, 1, 1))
    return res
