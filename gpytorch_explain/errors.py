#!/usr/bin/env python3
"""Exceptions raised by gpytorch-explain."""

from __future__ import annotations

__all__ = [
    "AutogradFallbackWarning",
    "ConvergenceError",
    "KernelNotDifferentiableError",
    "ModelStateError",
    "QuadratureWarning",
]


class ModelStateError(RuntimeError, ValueError):
    """The model is in the wrong state for the call (train mode, no training data, ...).

    It is both a ``RuntimeError`` (as GPyTorch raises for such states) and a ``ValueError``
    (the call's input is unusable), so either ``except`` clause catches it.
    """


class ConvergenceError(RuntimeError):
    """An iterative solve (conjugate gradients) did not reach the accuracy a derived quantity needs.

    Raised instead of returning silently wrong local weights or attributions. Remedies: raise
    ``gpytorch.settings.max_cg_iterations``, use a larger preconditioner
    (``gpytorch.settings.max_preconditioner_size``), compute in float64, let the exact dense path reach further
    (a larger ``gpytorch_explain.settings.dense_memory_budget``, or a larger
    ``gpytorch_explain.settings.max_cholesky_size``, as far as memory allows), or use an inducing-point base kernel
    (solved exactly by Woodbury).
    """


class KernelNotDifferentiableError(NotImplementedError, ValueError):
    """The kernel lacks the derivatives a gradient/IG functional needs (e.g. Matérn-1/2 at ``x = x'``, or a kernel
    computed outside autograd, whose derivatives come back disconnected).

    Both a ``NotImplementedError`` and a ``ValueError``, so either ``except`` clause catches it.
    """


class AutogradFallbackWarning(UserWarning):
    """The closed forms do not apply to this model; its attributions come from the exact autograd fallback."""


class QuadratureWarning(UserWarning):
    """The adaptive quadrature order did not reach its tolerance; the warning gives the numbers."""
