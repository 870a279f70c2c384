#!/usr/bin/env python3
"""Exceptions raised by gpytorch-explain."""

from __future__ import annotations

__all__ = ["ConvergenceError", "ModelStateError"]


class ModelStateError(RuntimeError, ValueError):
    """The model is in the wrong state for the call (train mode, no training data, ...).

    It is both a ``RuntimeError`` (as GPyTorch raises for such states) and a ``ValueError``
    (the call's input is unusable), so either ``except`` clause catches it.
    """


class ConvergenceError(RuntimeError):
    """An iterative solve (conjugate gradients) did not reach the accuracy a derived quantity needs.

    Raised instead of returning silently wrong local weights or attributions. Remedies: raise
    ``gpytorch.settings.max_cg_iterations``, use a larger preconditioner
    (``gpytorch.settings.max_preconditioner_size``), compute in float64, lower
    ``gpytorch_explain.settings.max_cholesky_size`` no further than memory allows (the dense path is
    exact), or use an inducing-point base kernel (solved exactly by Woodbury).
    """
