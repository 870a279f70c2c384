#!/usr/bin/env python3
r"""Derivative blocks of kernel leaves: closed forms for GPyTorch's stationary, periodic, linear and constant
kernels, plain autograd (the double-backward trick) for any other kernel, and the recursion through
``ScaleKernel`` / sums / products. The formulas are stated in :mod:`gpytorch_explain.attribution.kernel_derivatives`.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import gpytorch
import torch
from gpytorch.kernels import (
    AdditiveKernel,
    ConstantKernel,
    Kernel,
    LinearKernel,
    MaternKernel,
    PeriodicKernel,
    ProductKernel,
    RBFKernel,
    RQKernel,
    ScaleKernel,
)
from linear_operator import to_dense
from torch import Tensor

from ..errors import KernelNotDifferentiableError
from ._differentiability import check_mean_square_differentiable
from ._roles import kernel_role

_RADIAL = (RBFKernel, RQKernel, MaternKernel)
_CLOSED = (RBFKernel, RQKernel, MaternKernel, PeriodicKernel, LinearKernel, ConstantKernel)
_STRUCT = (ScaleKernel, AdditiveKernel, ProductKernel)
_SQRT3, _SQRT5 = math.sqrt(3.0), math.sqrt(5.0)


# =====================================================================================================================
# Derivative blocks
# =====================================================================================================================
@dataclass
class _Derivs:
    r"""Kernel values and derivatives on a broadcast block of point pairs ``(*S)``.

    ``k`` :math:`k(\mathbf x_1, \mathbf x_2)` ``(*S)``; ``g1`` :math:`\partial k/\partial x_{1,i}` ``(*S, D)``;
    ``g2`` :math:`\partial k/\partial x_{2,j}` ``(*S, D)``; ``h`` :math:`\partial^2 k/\partial x_{1,i}\partial
    x_{2,j}` ``(*S, D, D)``. Entries not requested are ``None``.
    """

    k: Tensor
    g1: Tensor | None = None
    g2: Tensor | None = None
    h: Tensor | None = None

    def scale(self, c: Tensor) -> _Derivs:
        """Multiply by a parameter ``c`` broadcastable with ``k``."""
        return _Derivs(
            self.k * c,
            None if self.g1 is None else self.g1 * c.unsqueeze(-1),
            None if self.g2 is None else self.g2 * c.unsqueeze(-1),
            None if self.h is None else self.h * c.unsqueeze(-1).unsqueeze(-1),
        )

    def __add__(self, other: _Derivs) -> _Derivs:
        def add(a: Tensor | None, b: Tensor | None) -> Tensor | None:
            return None if a is None or b is None else a + b

        return _Derivs(self.k + other.k, add(self.g1, other.g1), add(self.g2, other.g2), add(self.h, other.h))

    def __mul__(self, other: _Derivs) -> _Derivs:
        """Product rule."""
        a, b = self, other
        k = a.k * b.k
        g1 = g2 = h = None
        if a.g1 is not None and b.g1 is not None:
            g1 = a.g1 * b.k.unsqueeze(-1) + a.k.unsqueeze(-1) * b.g1
        if a.g2 is not None and b.g2 is not None:
            g2 = a.g2 * b.k.unsqueeze(-1) + a.k.unsqueeze(-1) * b.g2
        if a.h is not None and b.h is not None:
            h = (
                a.h * b.k[..., None, None]
                + a.k[..., None, None] * b.h
                + a.g1.unsqueeze(-1) * b.g2.unsqueeze(-2)
                + b.g1.unsqueeze(-1) * a.g2.unsqueeze(-2)
            )
        return _Derivs(k, g1, g2, h)

    def embed(self, idx: Tensor | None, dims: int) -> _Derivs:
        """Scatter derivatives with respect to the columns ``idx`` into all ``dims`` input columns."""
        if idx is None:
            return self

        def vec(g: Tensor | None) -> Tensor | None:
            if g is None:
                return None
            return g.new_zeros(*g.shape[:-1], dims).index_add(-1, idx, g)

        h = self.h
        if h is not None:
            h = h.new_zeros(*h.shape[:-2], dims, h.size(-1)).index_add(-2, idx, h)
            h = h.new_zeros(*h.shape[:-1], dims).index_add(-1, idx, h)
        return _Derivs(self.k, vec(self.g1), vec(self.g2), h)


def _row(p: Tensor, npd: int) -> Tensor:
    """A ``(*kb, 1, c)`` kernel parameter as ``(*kb, 1, ..., 1, c)`` with ``npd`` point dimensions."""
    p = p[..., 0, :]
    return p.reshape(*p.shape[:-1], *([1] * npd), p.size(-1))


def _scalar(p: Tensor, npd: int) -> Tensor:
    """A ``(*kb)`` kernel parameter as ``(*kb, 1, ..., 1)`` with ``npd`` point dimensions."""
    return p.reshape(*p.shape, *([1] * npd))


def _safe_r(s: Tensor) -> tuple[Tensor, Tensor]:
    """:math:`r = \\sqrt s` and a denominator-safe copy (1 where :math:`s = 0`); finite gradients at 0."""
    pos = s > 0
    root = torch.where(pos, s, torch.ones_like(s)).sqrt()
    return torch.where(pos, root, torch.zeros_like(s)), root


def _radial_profile(
    kernel: Kernel, s: Tensor, npd: int, need: int, r: Tensor | None = None, value: bool = True
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    r""":math:`(k, \gamma, \omega)` of a radial leaf at squared scaled distances ``s`` (see the module docs).

    ``need`` < 2 skips :math:`\omega`, ``value=False`` skips :math:`k`; ``r`` (:math:`\sqrt s`) may be given.
    """
    if isinstance(kernel, RBFKernel):
        e = torch.exp(-0.5 * s)
        return e, -e, e
    if isinstance(kernel, RQKernel):
        alpha = _scalar(kernel.alpha[..., 0], npd)
        w = 1.0 + s / (2.0 * alpha)
        k = w.pow(-alpha)
        if need == 0:
            return k, None, None
        gamma = -k / w
        return k, gamma, -gamma / w * (alpha + 1.0) / alpha if need >= 2 else None
    if r is None:
        r, _ = _safe_r(s)
    if kernel.nu == 1.5:
        e = torch.exp(-_SQRT3 * r)
        k = (1.0 + _SQRT3 * r) * e if value else None
        omega = None
        if need >= 2:
            omega = torch.where(
                r > 0, 3.0 * _SQRT3 * e / torch.where(r > 0, r, torch.ones_like(r)), torch.zeros_like(e)
            )
        return k, -3.0 * e, omega
    e = torch.exp(-_SQRT5 * r)
    k = (1.0 + _SQRT5 * r + (5.0 / 3.0) * s) * e if value else None
    if need == 0:
        return k, None, None
    return k, -(5.0 / 3.0) * (1.0 + _SQRT5 * r) * e, (25.0 / 3.0) * e if need >= 2 else None


def _check_leaf(kernel: Kernel) -> None:
    """Raise for kernels whose first/second derivatives do not exist."""
    name = type(kernel).__name__
    if isinstance(kernel, MaternKernel) and kernel.nu == 0.5:
        raise KernelNotDifferentiableError(
            f"{name}(nu=0.5) is k = exp(-r), not differentiable at coincident inputs (x = x'): its GP has no "
            "mean-square derivative, so gradient and integrated-gradient covariances do not exist. "
            "Use nu=1.5 or nu=2.5."
        )
    cls = type(kernel).__name__
    if cls in ("IndexKernel", "HammingIMQKernel", "HammingKernel"):
        raise KernelNotDifferentiableError(f"{name} acts on discrete (categorical/index) inputs: no derivatives.")
    if cls == "PiecewisePolynomialKernel":
        if getattr(kernel, "q", None) == 0:
            raise KernelNotDifferentiableError(
                f"{name}(q=0) is (1 - r)^j_+, not differentiable at coincident inputs (x = x')."
            )
        raise NotImplementedError(
            f"{name} has no closed-form derivatives here and GPyTorch evaluates it through cdist, whose second "
            "derivative autograd cannot take at coincident inputs."
        )


def _closed_leaf(kernel: Kernel, x1: Tensor, x2: Tensor, npd: int, need: int) -> _Derivs:
    """Closed-form values/derivatives of a supported leaf on the broadcast block ``x1``, ``x2`` ``(*S, d)``."""
    if isinstance(kernel, _RADIAL):
        ls = _row(kernel.lengthscale, npd)
        z = (x1 - x2) / ls
        s = z.square().sum(-1)
        k, gamma, omega = _radial_profile(kernel, s, npd, need)
        if need == 0:
            return _Derivs(k)
        g1 = gamma.unsqueeze(-1) * z / ls
        if need == 1:
            return _Derivs(k, g1)
        lsl = ls.unsqueeze(-1) * ls.unsqueeze(-2)
        eye = torch.eye(z.size(-1), dtype=z.dtype, device=z.device)
        h = -(omega[..., None, None] * z.unsqueeze(-1) * z.unsqueeze(-2) + gamma[..., None, None] * eye) / lsl
        return _Derivs(k, g1, -g1, h)
    if isinstance(kernel, PeriodicKernel):
        lam = _row(kernel.lengthscale, npd)
        period = _row(kernel.period_length, npd)
        u = math.pi * (x1 - x2) / period
        k = torch.exp(-2.0 * (torch.sin(u).square() / lam).sum(-1))
        if need == 0:
            return _Derivs(k)
        a = -(2.0 * math.pi / (lam * period)) * torch.sin(2.0 * u)
        g1 = k.unsqueeze(-1) * a
        if need == 1:
            return _Derivs(k, g1)
        curv = (4.0 * math.pi**2 / (lam * period.square())) * torch.cos(2.0 * u)
        h = k[..., None, None] * (torch.diag_embed(curv) - a.unsqueeze(-1) * a.unsqueeze(-2))
        return _Derivs(k, g1, -g1, h)
    if isinstance(kernel, LinearKernel):
        v = _row(kernel.variance, npd)
        k = (x1 * x2 * v).sum(-1)
        if need == 0:
            return _Derivs(k)
        shape = (*k.shape, x1.size(-1))
        g1 = (v * x2).expand(shape)
        if need == 1:
            return _Derivs(k, g1)
        g2 = (v * x1).expand(shape)
        h = torch.diag_embed(v.expand(shape))
        return _Derivs(k, g1, g2, h)
    if isinstance(kernel, ConstantKernel):
        c = _scalar(kernel.constant[..., 0], npd)
        k = c * torch.ones_like(x1[..., 0] + x2[..., 0])
        if need == 0:
            return _Derivs(k)
        zero = torch.zeros((*k.shape, x1.size(-1)), dtype=k.dtype, device=k.device)
        return _Derivs(k, zero, zero, zero.unsqueeze(-1).expand(*zero.shape, x1.size(-1)) if need >= 2 else None)
    raise AssertionError(type(kernel))  # pragma: no cover


def _is_closed(kernel: Kernel, method: str) -> bool:
    return kernel_role(kernel) in _CLOSED and method == "auto"


def _derivs(
    kernel: Kernel, x1: Tensor, x2: Tensor, npd: int, need: int, method: str, apply_active: bool = True
) -> _Derivs:
    """Recursive values/derivatives of ``kernel`` on the broadcast block ``x1``, ``x2`` (``need``: 0, 1 or 2)."""
    _check_leaf(kernel)
    role = kernel_role(kernel)
    structural = role in _STRUCT or _is_closed(kernel, method)
    if not structural:
        return _autograd_leaf(kernel, x1, x2, npd, need, use_call=apply_active)
    dims = x1.size(-1)
    idx = kernel.active_dims if apply_active else None
    if idx is not None:
        x1, x2 = x1.index_select(-1, idx), x2.index_select(-1, idx)
    if role is ScaleKernel:
        res = _derivs(kernel.base_kernel, x1, x2, npd, need, method, apply_active=False)
        res = res.scale(_scalar(kernel.outputscale, npd))
    elif role is AdditiveKernel:
        parts = [_derivs(c, x1, x2, npd, need, method) for c in kernel.kernels]
        res = parts[0]
        for p in parts[1:]:
            res = res + p
    elif role is ProductKernel:
        parts = [_derivs(c, x1, x2, npd, need, method) for c in kernel.kernels]
        res = parts[0]
        for p in parts[1:]:
            res = res * p
    else:
        res = _closed_leaf(kernel, x1, x2, npd, need)
    return res.embed(idx, dims)


# ------------------------------------------------------------------------------------------------------- autograd
def _batched_grad(ys: Tensor, v: Tensor) -> Tensor:
    r"""Rows :math:`\partial y_l / \partial v` for a vector ``ys`` ``(L,)`` that is linear in ``v``: ``(L, *v)``."""
    if not ys.requires_grad:
        return v.new_zeros(ys.numel(), *v.shape)
    eye = torch.eye(ys.numel(), dtype=ys.dtype, device=ys.device)
    try:
        (res,) = torch.autograd.grad(
            ys, v, grad_outputs=eye, retain_graph=True, is_grads_batched=True, allow_unused=True
        )
        if res is None:
            return v.new_zeros(ys.numel(), *v.shape)
        return res
    except RuntimeError:
        rows = []
        for i in range(ys.numel()):
            if not ys[i].requires_grad:
                rows.append(torch.zeros_like(v))
                continue
            (g,) = torch.autograd.grad(ys[i], v, retain_graph=True, allow_unused=True)
            rows.append(torch.zeros_like(v) if g is None else g)
        return torch.stack(rows)


def _grad_vec(y: Tensor, x: Tensor) -> Tensor:
    """``dy/dx`` with graph (zeros if ``y`` does not depend on ``x``)."""
    if not y.requires_grad:
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(y, x, create_graph=True, allow_unused=True)
    return torch.zeros_like(x) if g is None else g


def _check_connected(K: Tensor, s: Tensor, t: Tensor, name: str) -> None:
    """Raise when ``K`` does not reach the input shifts ``s``/``t`` through autograd (forward left torch)."""
    connected = K.requires_grad
    if connected:
        grads = torch.autograd.grad(K.sum(), (s, t), retain_graph=True, allow_unused=True)
        connected = all(g is not None for g in grads)
    if not connected:
        raise KernelNotDifferentiableError(
            f"{name}'s output is disconnected from autograd with respect to its inputs (its forward leaves torch, "
            "e.g. computes in numpy and wraps the result with torch.tensor, or detaches x): its derivatives cannot "
            "be taken, and returning zeros would claim 'no effect' with zero variance. Implement forward with "
            "differentiable torch operations."
        )


def _coincident_mixed(evaluate, h: Tensor, a1: Tensor, a2: Tensor, back, fn) -> Tensor:
    r"""The mixed second derivatives at (nearly) coincident pairs, read off shifted evaluations.

    Kernels written on GPyTorch's squared distance (``covar_dist(..., square_dist=True)``, the pattern GPyTorch
    recommends for new kernels) compute :math:`\|\mathbf x\|^2 + \|\mathbf x'\|^2 - 2\mathbf x^\top\mathbf x'`
    and clamp it at 0. At a pair closer than the round-off of that expression it can come out negative, the clamp
    cuts its gradient, and autograd drops the :math:`\partial_i\partial'_j` term of the squared distance: a variance
    term lost, and joint covariances with negative diagonals. For such pairs in float64 (distance below
    :math:`100\sqrt{\epsilon}\max(1, |x|)`) the derivative is taken instead with the second argument shifted by
    :math:`\pm e\,\mathbf u` (:math:`\mathbf u` a unit diagonal, :math:`e = \varepsilon, 2\varepsilon`) and the
    central averages :math:`\bar h(e)` are extrapolated, :math:`(4\bar h(\varepsilon) - \bar h(2\varepsilon))/3`:
    an error :math:`O(\varepsilon^4)` for a twice continuously differentiable kernel. The derivatives at the shifted
    points are autograd's (exact), so only the step's smoothness error enters; :math:`\varepsilon` is read off the
    kernel itself (:func:`_correlation_step`), small against its correlation length. Where no such step lies well
    outside the round-off zone (a correlation length below it, a kernel that vanishes at the rows, or float32),
    autograd's values stand.
    """
    if a1.dtype != torch.float64:
        return h  # in lower precision the clamp zone is as wide as a lengthscale may be: no reliable step
    dist = back((a1.unsqueeze(-2) - a2.unsqueeze(-3)).abs().amax(-1).detach(), 0)
    size = max(1.0, float(a1.detach().abs().max()), float(a2.detach().abs().max()))
    eps = torch.finfo(a1.dtype).eps
    zone = 100.0 * math.sqrt(eps) * size  # pairs this close may round to a negative squared distance
    near = dist <= zone
    if not bool(near.any()):
        return h
    d = a1.size(-1)
    u = torch.full((d,), 1.0 / math.sqrt(d), dtype=a1.dtype, device=a1.device)
    step = _correlation_step(fn, a1.reshape(-1, d)[:16].detach(), u, size)
    if step is None or step < 10.0 * zone:
        # no row where the kernel is nonzero, or a correlation length within the round-off zone: the shifted points
        # would be as unreliable as the coincident ones, so autograd's values stand
        return h
    central = []
    for e in (step, 2.0 * step):
        central.append(0.5 * (evaluate(e * u, 2).h + evaluate(-e * u, 2).h))
    extrapolated = (4.0 * central[0] - central[1]) / 3.0
    return torch.where(near[..., None, None], extrapolated, h)


def _correlation_step(fn, rows: Tensor, u: Tensor, size: float) -> float | None:
    r"""The largest step :math:`e = \text{size}\cdot 2^{-j}` with
    :math:`|k(\mathbf x, \mathbf x + e\mathbf u) - k(\mathbf x, \mathbf x)| \le 10^{-6}\,|k(\mathbf x, \mathbf x)|`
    at every one of ``rows`` where :math:`k(\mathbf x, \mathbf x) \ne 0` (about :math:`10^{-3}` of the kernel's
    shortest correlation length there, for a smooth kernel, whatever the lengthscale: a fixed step would be wider than
    a lengthscale of :math:`10^{-7}`); ``None`` when the kernel vanishes at every row (e.g. :math:`x_0 x'_0 k` at
    :math:`x_0 = 0`)."""
    steps = size * torch.pow(2.0, -torch.arange(0, 64, dtype=rows.dtype, device=rows.device))
    best = None
    with torch.no_grad():
        for x0 in rows:
            k0 = to_dense(fn(x0.unsqueeze(0), x0.unsqueeze(0)))[..., 0, 0]
            if not bool((k0.abs() > torch.finfo(rows.dtype).tiny).all()):
                continue
            ke = to_dense(fn(x0.unsqueeze(0), x0 + steps.unsqueeze(-1) * u))[..., 0, :]  # (*kernel batch, 64)
            gap = ((ke - k0.unsqueeze(-1)).abs() / k0.abs().unsqueeze(-1)).reshape(-1, steps.numel()).amax(0)
            ok = torch.nonzero(gap <= 1e-6)
            step = float(steps[int(ok[0, 0])]) if ok.numel() else float(steps[-1])
            best = step if best is None else min(best, step)
    return best


#: the verdict of :func:`check_mean_square_differentiable` per kernel object (autograd leaves): None, or the error
_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _autograd_leaf(kernel: Kernel, x1: Tensor, x2: Tensor, npd: int, need: int, use_call: bool) -> _Derivs:
    r"""Values/derivatives of an arbitrary kernel by autograd (see the module docs).

    Evaluates :math:`K_{pq}(\mathbf s, \mathbf t) = k(\mathbf x_p + \mathbf s, \mathbf x'_q + \mathbf t)` densely
    (one ``(m1, m2)`` block per leading index if the block has cross structure, else one ``1 × 1`` block per pair),
    with one extra first-argument row so that ``x1`` and ``x2`` never compare equal (kernels such as
    ``LinearKernel`` drop ``x2`` when ``torch.equal(x1, x2)``). Then
    :math:`\partial_{s_i} K_{pq} = \partial_i k`, :math:`\partial_{t_j} K_{pq} = \partial'_j k` and
    :math:`\partial_{s_i}\partial_{t_j} K_{pq} = \partial_i\partial'_j k` for all :math:`p, q` at once.
    """
    name = type(kernel).__name__
    d = x1.size(-1)
    shape = torch.broadcast_shapes(x1.shape[:-1], x2.shape[:-1])
    nb = len(shape) - npd
    bshape = torch.broadcast_shapes(shape[:nb], kernel.batch_shape)
    full = (*bshape, *shape[nb:])
    x1 = x1.reshape((1,) * (len(full) + 1 - x1.dim()) + tuple(x1.shape))
    x2 = x2.reshape((1,) * (len(full) + 1 - x2.dim()) + tuple(x2.shape))
    nbf = len(bshape)
    cross = npd >= 2 and x1.size(-2) == 1 and x2.size(-3) == 1
    if cross:
        m1, m2 = full[-2], full[-1]
        outer = full[nbf:-2]
        a1 = x1.squeeze(-2).expand(*bshape, *outer, m1, d)
        a2 = x2.squeeze(-3).expand(*bshape, *outer, m2, d)
    else:
        m1 = m2 = 1
        outer = full[nbf:]
        a1 = x1.expand(*full, d).unsqueeze(-2)
        a2 = x2.expand(*full, d).unsqueeze(-2)
    no = len(outer)
    perm = (*range(nbf, nbf + no), *range(nbf), nbf + no, nbf + no + 1)
    a1 = a1.permute(perm).reshape(-1, *bshape, m1, d)
    a2 = a2.permute(perm).reshape(-1, *bshape, m2, d)
    extra = 2 if m1 + 1 == m2 else 1
    a1 = torch.cat([a1, a1[..., :1, :].expand(*a1.shape[:-2], extra, d) + 1.0], dim=-2)

    def back(t: Tensor, tail: int) -> Tensor:
        """``(O, *bshape, m1, m2, *tail)`` -> ``(*bshape, *outer, [m1, m2,] *tail)``."""
        t = t.reshape(*outer, *bshape, m1, m2, *t.shape[t.dim() - tail :])
        inv = (*range(no, no + nbf), *range(no), *range(no + nbf, t.dim()))
        t = t.permute(inv)
        if not cross:
            t = t.reshape(*bshape, *outer, *t.shape[t.dim() - tail :])
        return t

    try:
        with torch.enable_grad(), gpytorch.settings.lazily_evaluate_kernels(False):
            fn = kernel if use_call else kernel.forward
            if need >= 2:
                if kernel not in _PROBED:
                    x0 = a1.reshape(-1, d)[0].detach()
                    try:
                        check_mean_square_differentiable(
                            lambda R: to_dense(fn(R, R)), x0, torch.full_like(x0, max(1.0, float(x0.abs().max()))), name
                        )
                        _PROBED[kernel] = None
                    except KernelNotDifferentiableError as err:
                        _PROBED[kernel] = err
                if _PROBED[kernel] is not None:
                    raise KernelNotDifferentiableError(str(_PROBED[kernel]))

            def evaluate(shift: Tensor | None, want: int) -> _Derivs:
                """The values and derivatives with the second argument shifted by ``shift`` (``None``: not)."""
                s = torch.zeros(d, dtype=a1.dtype, device=a1.device, requires_grad=True)
                t = torch.zeros(d, dtype=a1.dtype, device=a1.device, requires_grad=True)
                second = a2 + t if shift is None else a2 + shift + t
                K = to_dense(fn(a1 + s, second))[..., :m1, :]
                K = K.expand(K.shape[0], *bshape, m1, m2)
                out = _Derivs(back(K.detach(), 0))
                if want >= 1:
                    _check_connected(K, s, t, name)
                    v = torch.ones_like(K, requires_grad=True)
                    total = (K * v).sum()
                    gs = _grad_vec(total, s)
                    out.g1 = back(_batched_grad(gs, v).movedim(0, -1), 1)
                    if want >= 2:
                        gt = _grad_vec(total, t)
                        out.g2 = back(_batched_grad(gt, v).movedim(0, -1), 1)
                        hst = torch.stack([_grad_vec(gs[i], t) for i in range(d)])
                        h = _batched_grad(hst.reshape(-1), v).reshape(d, d, *v.shape)
                        out.h = back(h.movedim(0, -1).movedim(0, -1), 2)
                return out

            res = evaluate(None, need)
            if need >= 2:
                res.h = _coincident_mixed(evaluate, res.h, a1[..., :m1, :], a2, back, fn)
    except KernelNotDifferentiableError:
        raise
    except (RuntimeError, NotImplementedError) as err:
        raise NotImplementedError(
            f"Autograd derivatives of {name} failed ({err}). The kernel needs closed-form support or must be "
            "implemented with twice-differentiable torch operations."
        ) from err
    for part in (res.k, res.g1, res.g2, res.h):
        if part is not None and not torch.isfinite(part).all():
            raise KernelNotDifferentiableError(
                f"Autograd derivatives of {name} are not finite (typically at coincident inputs x = x'): the kernel "
                "is not (twice) differentiable there, or its implementation is not (e.g. sqrt of a squared "
                "distance). Gradient/IG covariances need a kernel that is twice differentiable at x = x'."
            )
    return res
