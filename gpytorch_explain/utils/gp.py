#!/usr/bin/env python3
"""Helpers around GPyTorch models."""

from __future__ import annotations

from collections.abc import Callable

import torch
from gpytorch.kernels import Kernel
from gpytorch.models import ExactGP
from gpytorch.models.exact_prediction_strategies import prediction_strategy

__all__ = ["ensure_prediction_strategy", "kernel_diag"]


def ensure_prediction_strategy(model: ExactGP, factory: Callable | None = None):
    """The model's prediction strategy, built from its training data if it has none yet.

    This is what ``ExactGP.__call__`` does on its first posterior call (``factory`` defaults to
    GPyTorch's ``prediction_strategy`` dispatcher), so later predictions reuse the same caches.
    """
    if model.prediction_strategy is None:
        train_inputs = list(model.train_inputs)
        train_prior = model._get_train_prior_distribution(train_inputs)
        model.prediction_strategy = (factory or prediction_strategy)(
            train_inputs=train_inputs,
            train_prior_dist=train_prior,
            train_labels=model.train_targets,
            likelihood=model.likelihood,
        )
    return model.prediction_strategy


def kernel_diag(kernel: Kernel, x1: torch.Tensor, x2: torch.Tensor | None = None, **params) -> torch.Tensor:
    r""":math:`k(\mathbf x_i, \mathbf x'_i)` for each row, ``kernel(x1, x2, diag=True)`` with the inputs first expanded
    to the batch shape of the kernel and of every kernel inside it.

    ``gpytorch.kernels.Kernel.__call__`` decides whether a kernel "ate" the ``diag`` option from the result's
    shape: for a batched kernel (batch ``(C,)``) on unbatched inputs of :math:`m = C` rows, the correct diagonal
    ``(C, m)`` looks like a full ``m x m`` matrix and its diagonal is taken instead, giving batch member
    :math:`p`'s value at row :math:`p` only (e.g. each point gets another class's prior variance). Expanded inputs
    do not meet that test.

    Example:
        >>> import torch, gpytorch
        >>> k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(), batch_shape=torch.Size([3]))
        >>> k.outputscale = torch.tensor([1.0, 2.0, 3.0])
        >>> kernel_diag(k, torch.zeros(3, 2))[2]  # batch member 2 at each of the 3 rows
        tensor([3., 3., 3.], grad_fn=<SelectBackward0>)
    """
    shapes = [k.batch_shape for k in kernel.modules() if isinstance(k, Kernel)]
    batch = torch.broadcast_shapes(*shapes, x1.shape[:-2], *(() if x2 is None else (x2.shape[:-2],)))
    if len(batch):
        x1 = x1.expand(*batch, *x1.shape[-2:])
        if x2 is not None:
            x2 = x2.expand(*batch, *x2.shape[-2:])
    return kernel(x1, x2, diag=True, **params)
