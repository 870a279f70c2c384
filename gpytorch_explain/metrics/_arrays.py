#!/usr/bin/env python3
"""Conversion and checks shared by the metric functions (numpy arrays or torch tensors in, numpy out)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

__all__ = ["as_array", "as_positive_int", "as_real", "call_predict", "resolve_baseline"]


def as_array(name: str, value, ndims: tuple[int, ...] | None = None, allow_nan: bool = False) -> np.ndarray:
    """``value`` (array-like or tensor) as a float64 numpy array, with its shape and finiteness checked."""
    if torch.is_tensor(value):
        value = value.detach().cpu()
        value = (value.resolve_conj() if value.is_complex() else value.double()).numpy()
    try:
        complex_ = np.iscomplexobj(value)
        arr = np.asarray(np.real(value) if complex_ else value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric array or tensor, got {type(value).__name__}.") from exc
    if complex_:
        raise ValueError(f"{name} has complex values; pass real numbers (e.g. take .real or abs() yourself).")
    if ndims is not None and arr.ndim not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"{name} must be {want}, got shape {arr.shape}.")
    if not allow_nan and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains {int((~np.isfinite(arr)).sum())} NaN or infinite value(s).")
    return arr


def _scalar_item(value):
    """A 0-d numpy array or torch tensor as its Python number; anything else unchanged."""
    if torch.is_tensor(value) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def as_positive_int(name: str, value) -> int:
    """``value`` as a Python int >= 1: an int, a numpy integer or a 0-d integer array/tensor (never a bool)."""
    item = _scalar_item(value)
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)) or item < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(item)


def as_real(name: str, value) -> float:
    """``value`` as a Python float: a real number or a 0-d real array/tensor (never a bool or a string)."""
    item = _scalar_item(value)
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a real number, got {value!r}.")
    return float(item)


def resolve_baseline(baseline, x: np.ndarray) -> np.ndarray:
    """The ``(m, D)`` baseline: ``None`` -> column mean of ``x`` (an error for one sample); a scalar -> every
    feature of every sample; ``(D,)`` or ``(1, D)`` -> every sample; ``(m, D)`` as is."""
    m, D = x.shape
    if baseline is None:
        if m == 1:
            raise ValueError(
                "with one sample the default baseline (the column mean of x) is the sample itself, so no feature "
                "would be removed; pass baseline= (e.g. the training mean, or 0.0 for standardised data)."
            )
        return np.broadcast_to(x.mean(0), (m, D))
    b = as_array("baseline", baseline, (0, 1, 2))
    if b.shape not in ((), (D,), (1, D), (m, D)):
        raise ValueError(
            f"baseline must be a scalar or have shape (D,) = ({D},), (1, D) = (1, {D}) or (m, D) = ({m}, {D}), "
            f"got {b.shape}."
        )
    return np.broadcast_to(b, (m, D))


def call_predict(predict_fn: Callable, points: np.ndarray, like) -> np.ndarray:
    """Call ``predict_fn`` on ``points`` given as the type of ``like`` (tensor of its dtype/device, or numpy).

    The output must have one finite value per row; it is returned as a float64 numpy vector.
    """
    if torch.is_tensor(like):
        arg = torch.as_tensor(
            points, dtype=like.dtype if like.is_floating_point() else torch.float64, device=like.device
        )
    else:
        arg = points
    with torch.no_grad():
        out = predict_fn(arg)
    out = as_array("predict_fn output", out)
    if out.ndim == 2 and out.shape[1] == 1:
        out = out[:, 0]
    if out.shape != (points.shape[0],):
        raise ValueError(
            f"predict_fn must map an (n, D) input to n predictions; for n = {points.shape[0]} it returned "
            f"shape {out.shape}."
        )
    return out
