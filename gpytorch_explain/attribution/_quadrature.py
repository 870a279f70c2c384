#!/usr/bin/env python3
r"""Gauss–Legendre rules on :math:`[0, 1]` and the memory-bounded chunking used by the attribution code.

One home for what used to be three Gauss–Legendre helpers and four chunking helpers:

* :func:`gauss_legendre_np` / :func:`gauss_legendre` — the :math:`n`-point rule mapped from :math:`[-1, 1]` to
  :math:`[0, 1]`,

  .. math:: \int_0^1 g(t)\,dt \approx \sum_{q=1}^{n} w_q\, g(t_q), \qquad t_q = \tfrac12(\xi_q + 1),\
      w_q = \tfrac12 \omega_q, \qquad \sum_q w_q = 1,

  with :math:`(\xi_q, \omega_q)` NumPy's ``leggauss`` nodes and weights;
* :func:`chunk_slices` — consecutive slices of ``total`` items holding at most ``budget`` elements each (at
  least one item per slice);
* :func:`point_chunks` — slices of the points of ``x`` whose derived cross-covariance with ``X`` stays within
  :class:`~gpytorch_explain.settings.max_block_elements`.

Budgets are read from :class:`gpytorch_explain.settings.max_block_elements` when called, so
``with gpytorch_explain.settings.max_block_elements(b):`` takes effect at once.

Example:
    >>> import torch
    >>> t, w = gauss_legendre(3, torch.zeros((), dtype=torch.float64))
    >>> round(float(w.sum()), 14), round(float((w * t**2).sum()), 14)  # exact to degree 5
    (1.0, 0.33333333333333)
    >>> chunk_slices(5, per_item=2, budget=4)
    [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from ..settings import block_budget

__all__ = ["MAX_ROW_ELEMENTS", "chunk_slices", "gauss_legendre", "gauss_legendre_np", "numel", "point_chunks"]

#: largest number of elements of the derived cross-covariance (points x D x n training inputs, or x M inducing points
#: for variational and SGPR models) formed at once; above it the mean is computed in chunks of points and the
#: covariance operator recomputes its rows per chunk (``lazy_rows``). This is the value at the default
#: ``max_block_elements`` (kept for import compatibility); the live budget is ``block_budget("attribution_points")``.
MAX_ROW_ELEMENTS = 2**24


@lru_cache(maxsize=64)
def gauss_legendre_np(order: int) -> tuple[np.ndarray, np.ndarray]:
    r"""``order``-point Gauss–Legendre nodes and weights on :math:`[0, 1]` as NumPy arrays (cached)."""
    nodes, weights = np.polynomial.legendre.leggauss(int(order))
    return (nodes + 1.0) / 2.0, weights / 2.0


def gauss_legendre(order: int, like: Tensor) -> tuple[Tensor, Tensor]:
    r"""Gauss–Legendre nodes and weights on :math:`[0, 1]` (:math:`\sum_q w_q = 1`) in ``like``'s dtype/device."""
    nodes, weights = gauss_legendre_np(int(order))
    return (
        torch.as_tensor(nodes, dtype=like.dtype, device=like.device),
        torch.as_tensor(weights, dtype=like.dtype, device=like.device),
    )


def numel(shape: Sequence[int]) -> int:
    """Number of elements of a shape (1 for ``()``)."""
    return int(math.prod(shape)) if len(shape) else 1


def chunk_slices(total: int, per_item: int, budget: int) -> list[slice]:
    """Consecutive slices of ``range(total)`` with at most ``budget // per_item`` items each (at least one).

    Returns ``[]`` when ``total`` is 0.
    """
    step = max(1, int(budget) // max(1, int(per_item)))
    return [slice(start, min(total, start + step)) for start in range(0, total, step)]


def point_chunks(x: Tensor, X: Tensor, batch_shape: tuple[int, ...] = ()) -> list[slice]:
    """Slices of the ``m`` points of ``x`` whose cross-covariance with ``X`` has at most
    :class:`~gpytorch_explain.settings.max_block_elements` elements (read at call time)."""
    batch = torch.broadcast_shapes(x.shape[:-2], X.shape[:-2], batch_shape).numel()
    per_point = max(1, batch * x.size(-1) * X.size(-2))
    return chunk_slices(x.size(-2), per_point, block_budget("attribution_points"))
