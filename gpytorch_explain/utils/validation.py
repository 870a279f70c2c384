#!/usr/bin/env python3
"""Input checks that fail early with a message naming the problem."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["check_feature_names", "check_matrix", "check_vector", "check_same_rows"]


def _check_tensor(name: str, value, ndims: Sequence[int], what: str) -> Tensor:
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}.")
    if value.dim() not in ndims:
        raise ValueError(f"{name} must be {what}, got a {value.dim()}-D tensor of shape {tuple(value.shape)}.")
    if not value.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor (float32 or float64), got {value.dtype}; "
            f"convert it with {name}.double() or {name}.float()."
        )
    if value.dtype in (torch.float16, torch.bfloat16):
        raise TypeError(
            f"{name} has dtype {value.dtype}, which GP solves (Cholesky, CG) do not support: use float64 "
            f"(recommended) or float32, e.g. {name}.double()."
        )
    if not torch.isfinite(value).all():
        bad = (~torch.isfinite(value)).sum().item()
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s).")
    return value


def check_matrix(name: str, value, cols: int | None = None, cols_name: str = "columns") -> Tensor:
    """Check that ``value`` is a finite floating-point ``n x cols`` matrix."""
    value = _check_tensor(name, value, (2,), "a 2-D tensor (n x features)")
    if cols is not None and value.size(-1) != cols:
        raise ValueError(f"{name} must have {cols} {cols_name}, got {value.size(-1)} (shape {tuple(value.shape)}).")
    return value


def check_vector(name: str, value) -> Tensor:
    """Check that ``value`` is a finite floating-point vector."""
    return _check_tensor(name, value, (1,), "a 1-D tensor (n,)")


def check_same_rows(**tensors: Tensor) -> None:
    """Check that all tensors have the same number of rows (their first dimension)."""
    sizes = {name: t.size(0) for name, t in tensors.items() if t is not None}
    if len(set(sizes.values())) > 1:
        desc = ", ".join(f"{name} has {n}" for name, n in sizes.items())
        raise ValueError(f"Mismatched number of samples n: {desc}.")


def check_feature_names(feature_names, num_features: int) -> list[str] | None:
    """Validate optional feature names: a sequence of ``num_features`` names (not one string)."""
    if feature_names is None:
        return None
    if isinstance(feature_names, str):
        raise TypeError("feature_names must be a sequence of names, not a single string.")
    names = [str(f) for f in feature_names]
    if len(names) != num_features:
        raise ValueError(f"feature_names has {len(names)} names but there are {num_features} features.")
    return names
