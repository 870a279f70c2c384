#!/usr/bin/env python3
r"""Additive terms of a kernel and the kink subspaces of its Matérn leaves, with the tolerances and graded
breakpoints that the path integrals (:mod:`gpytorch_explain.attribution.path_integrals`) use around kinks and
near-misses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from gpytorch.kernels import (
    AdditiveKernel,
    Kernel,
    MaternKernel,
    ProductKernel,
    ScaleKernel,
)
from torch import Tensor

from ._derivative_leaves import _RADIAL, _Derivs, _derivs, _scalar
from ._roles import kernel_role

#: Relative distance below which paths (or a path and a point) are treated as intersecting.
DEFAULT_KINK_TOL = 1e-7
#: Near-misses closer than this fraction of the path length (lengthscale units) get graded panels.
_NEAR = 0.2
#: Maximum number of geometric grading steps on each side of a near-miss.
_GRADE_STEPS = 12


def _tol(kink_tol: float, like: Tensor) -> float:
    """Kink tolerance, at least a few ulps of the working dtype."""
    return max(float(kink_tol), 16.0 * torch.finfo(like.dtype).eps)


def _orders(order: int, return_error: bool) -> tuple[int, ...]:
    if int(order) != order or order < 1:
        raise ValueError(f"order must be a positive integer, got {order!r}.")
    order = int(order)
    return (order, max(1, order // 2)) if return_error else (order,)


# =====================================================================================================================
# Additive terms and kink subspaces
# =====================================================================================================================
def _compose(dims: Tensor | None, idx: Tensor | None) -> Tensor | None:
    if idx is None:
        return dims
    return idx if dims is None else dims.index_select(0, idx)


@dataclass
class _Term:
    """One additive term: ``prod(scales) * kernel(x[..., dims], x'[..., dims])``."""

    kernel: Kernel
    dims: Tensor | None
    scales: tuple[ScaleKernel, ...]
    apply_active: bool

    def derivs(self, x1: Tensor, x2: Tensor, npd: int, need: int, method: str) -> _Derivs:
        dims = x1.size(-1)
        if self.dims is not None:
            x1, x2 = x1.index_select(-1, self.dims), x2.index_select(-1, self.dims)
        res = _derivs(self.kernel, x1, x2, npd, need, method, apply_active=self.apply_active)
        for sc in self.scales:
            res = res.scale(_scalar(sc.outputscale, npd))
        return res.embed(self.dims, dims)

    def radial(self, method: str) -> tuple[Kernel, Tensor | None, Tensor | None] | None:
        """``(leaf, dims, outputscale)`` if the term is a (scaled) radial leaf with closed forms."""
        if kernel_role(self.kernel) not in _RADIAL or method != "auto":
            return None
        dims = _compose(self.dims, self.kernel.active_dims if self.apply_active else None)
        scale = None
        for sc in self.scales:
            scale = sc.outputscale if scale is None else scale * sc.outputscale
        return self.kernel, dims, scale


def _terms(kernel: Kernel, dims: Tensor | None = None, scales: tuple = (), apply_active: bool = True) -> list[_Term]:
    """Split a kernel into additive terms (through ``ScaleKernel`` and ``AdditiveKernel``)."""
    role = kernel_role(kernel)
    if role is ScaleKernel:
        d = _compose(dims, kernel.active_dims) if apply_active else dims
        return _terms(kernel.base_kernel, d, (*scales, kernel), False)
    if role is AdditiveKernel:
        d = _compose(dims, kernel.active_dims) if apply_active else dims
        return [t for c in kernel.kernels for t in _terms(c, d, scales, True)]
    return [_Term(kernel, dims, scales, apply_active)]


@dataclass
class _Kink:
    """A Matérn leaf's input columns ``dims`` ``(s,)`` and its lengthscales there ``ls`` ``(*kb, s)``."""

    dims: Tensor
    ls: Tensor

    def scaled(self, v: Tensor, npd: int) -> Tensor:
        """Columns ``dims`` of ``v`` ``(*B, *P, D)`` in lengthscale units (``npd`` point dimensions)."""
        ls = self.ls.reshape(*self.ls.shape[:-1], *([1] * npd), self.ls.size(-1))
        return v.index_select(-1, self.dims) / ls


def _kinks(kernel: Kernel, dims: Tensor | None, apply_active: bool, total: int) -> list[_Kink]:
    """Matérn leaves in ``kernel`` (where integrands are only finitely smooth), in input columns."""
    if apply_active:
        dims = _compose(dims, kernel.active_dims)
    role = kernel_role(kernel)
    if role is ScaleKernel:
        return _kinks(kernel.base_kernel, dims, False, total)
    if role in (AdditiveKernel, ProductKernel):
        return [s for c in kernel.kernels for s in _kinks(c, dims, True, total)]
    if isinstance(kernel, MaternKernel):
        idx = torch.arange(total, device=kernel.lengthscale.device) if dims is None else dims
        ls = kernel.lengthscale[..., 0, :].detach()
        return [_Kink(idx, ls.expand(*ls.shape[:-1], idx.numel()))]
    return []


def _term_kinks(term: _Term, total: int) -> list[_Kink]:
    seen: dict[tuple[int, ...], _Kink] = {}
    for kink in _kinks(term.kernel, term.dims, term.apply_active, total):
        seen.setdefault(tuple(sorted(set(kink.dims.tolist()))), kink)
    return list(seen.values())


def _graded(center: Tensor, width: Tensor, exact: Tensor, tol: float) -> Tensor:
    r"""Breakpoints at ``center`` and, unless ``exact``, geometrically graded around it:
    :math:`c \pm w 4^j`, :math:`j = 0..J-1` (``width`` :math:`w`), so that a near-singularity at complex
    distance :math:`w` from :math:`c` is resolved by panels no longer than 3x their distance to it. Points
    outside :math:`(\mathrm{tol}, 1 - \mathrm{tol})` are replaced by 1 (zero-length panels). ``(…, 1 + 2J)``."""
    steps = width.unsqueeze(-1) * (4.0 ** torch.arange(_GRADE_STEPS, dtype=width.dtype, device=width.device))
    steps = torch.where(exact.unsqueeze(-1), torch.full_like(steps, 2.0), steps)
    pts = torch.cat([center.unsqueeze(-1), center.unsqueeze(-1) - steps, center.unsqueeze(-1) + steps], -1)
    ok = (pts > tol) & (pts < 1 - tol)
    return torch.where(ok, pts, torch.ones_like(pts))


def _graded_np(center: float, width: float, lo_only: bool = False) -> list[float]:
    """Breakpoints in (0, 1) at ``center`` and ``center ± width 4^j`` (only ``+`` if ``lo_only``)."""
    out = [center]
    if width > 0:
        for j in range(_GRADE_STEPS):
            step = width * 4.0**j
            out.append(center + step)
            if not lo_only:
                out.append(center - step)
    return sorted(p for p in out if 1e-12 < p < 1 - 1e-12)


def _ravel(idx: tuple[Tensor, ...], shape: Sequence[int]) -> Tensor:
    """Flat (row-major) index from per-dimension indices."""
    flat = torch.zeros_like(idx[0])
    for i, size in zip(idx, shape, strict=True):
        flat = flat * size + i
    return flat


def _flat_owner(bidx: tuple[Tensor, ...], bshape: Sequence[int], count: int, device: torch.device) -> Tensor:
    """Flat batch index from per-dimension batch indices (``count`` entries)."""
    flat = torch.zeros(count, dtype=torch.long, device=device)
    for i, size in zip(bidx, bshape, strict=True):
        flat = flat * size + i
    return flat
