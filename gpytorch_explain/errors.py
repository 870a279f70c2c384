#!/usr/bin/env python3
"""Exceptions raised by gpytorch-explain."""

from __future__ import annotations

__all__ = ["ModelStateError"]


class ModelStateError(RuntimeError, ValueError):
    """The model is in the wrong state for the call (train mode, no training data, ...).

    It is both a ``RuntimeError`` (as GPyTorch raises for such states) and a ``ValueError``
    (the call's input is unusable), so either ``except`` clause catches it.
    """
