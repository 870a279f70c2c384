#!/usr/bin/env python3
r"""Integrated-gradient covariances of any twice-differentiable GPyTorch kernel: path integrals of the
derivatives of :mod:`gpytorch_explain.attribution.kernel_derivatives`,

.. math::

    \partial_i k(\mathbf a_r(t), \mathbf X)\,dt, \qquad \mathbf a_r(t) = \mathbf b^{(r)} + t\boldsymbol\Delta^{(r)},

    \operatorname{Cov}(\mathrm{IG}_i f(\mathbf x), \mathrm{IG}_j f(\mathbf x')) = \frac{1}{k k'}\sum_{r,s}
    \Delta^{(r)}_i \Delta'^{(s)}_j \int_0^1\!\!\int_0^1 \partial_i\partial'_j k(\mathbf a_r(t),
    \mathbf a'_s(u))\,dt\,du,

with :math:`\partial_i` acting on the first and :math:`\partial'_j` on the second argument. This module computes
them for any kernel built from

**Quadrature and kinks.** Path integrals use Gauss–Legendre (GL) rules of ``order`` nodes per panel (per
dimension in 2-D). Matérn kernels are only finitely smooth at :math:`\mathbf x = \mathbf x'`
(:math:`\partial_i\partial'_j k` contains :math:`e^{-\sqrt5 r} \approx 1 - \sqrt5 r`), so an integrand has a kink
wherever the two arguments meet, restricted to the Matérn leaf's active dimensions :math:`S`:

* ``ig_cross``: where a path passes through a data point (:math:`P_S(\mathbf a(t) - \mathbf X_j) = 0` at an
  interior :math:`t^*`) the GL rule is split into panels at :math:`t^*`;
* ``ig_joint`` / ``ig_point``: the singular set of :math:`P_S(\mathbf a(t) - \mathbf a'(u)) = 0` in the unit
  square is a point (cone singularity, e.g. the corner :math:`(0, 0)` for every pair of paths sharing a baseline,
  or :math:`(1, 1)` for two baselines of the same point) or a line (parallel paths: the diagonal :math:`t = u` for
  a path with itself, :math:`t = cu` for :math:`\mathbf x' - \mathbf b \parallel \mathbf x - \mathbf b`). The
  square is split along the diagonal through a singular corner into two triangles, each mapped to the square by a
  Duffy (collapsed) transform :math:`(t, u) = (\xi, \xi\eta)` resp. :math:`(\xi\eta, \xi)` with Jacobian
  :math:`\xi`: on each triangle the distance becomes :math:`r = \xi\,\rho(\eta)` with smooth :math:`\rho`, so the
  integrand is smooth and tensor GL converges exponentially (plain tensor GL only algebraically: for a path with
  itself, Matérn-5/2, errors :math:`9\cdot10^{-3}, 7\cdot10^{-4}, 5\cdot10^{-5}` at orders 8, 16, 32 against
  :math:`4\cdot10^{-11}, 4\cdot10^{-16}, 10^{-15}` with the split). Kink lines through that corner become lines
  :math:`\eta = \eta^*` where the :math:`\eta` range is split. Remaining configurations (paths crossing in their
  interiors, overlapping collinear paths with different baselines, ...) are subdivided exactly into convex
  polygons along the kink lines, fanned into triangles around singular points and integrated with the same
  collapsed rule (a per-pair Python loop; such pairs are rare).

Near-misses are smooth but nearly singular (a feature of width :math:`w` = closest distance / path length, in
lengthscale units) and are refined too when :math:`w <` ``_NEAR``: panels split at the closest approach and
graded geometrically around it (:math:`\pm w 4^j`) in ``ig_cross``; in 2-D, nearly parallel or nearly crossing
paths are triangulated around their closest point with graded :math:`\xi`/:math:`\eta` panels. Other smooth
kernels (RBF, RQ, periodic, linear, user kernels) use plain GL (tensor GL in 2-D).

Additive kernels are integrated term by term, each with the kinks of its own Matérn leaves. Error estimates
(``return_error=True``) are :math:`|I_N - I_{\lfloor N/2\rfloor}|` on the same subdivision: an upper-bound-ish
indicator, pessimistic when converged (the order-:math:`N` result is usually far more accurate) and large when
``order`` is too low.

**Fast paths.** For a (scaled) radial leaf the integrals need only scalar profiles at the nodes:
:math:`\sum_q w_q\partial_i k(\mathbf a(t_q), \mathbf X_j) = \frac{\sigma^2}{\ell_i^2}[(b_i - X_{ji})\sum_q
w_q\gamma_q + \Delta_i\sum_q w_q t_q\gamma_q]` (distances by ``cdist`` on exact differences) and
:math:`\sum_n w_n\partial_i\partial'_j k = -\frac{\sigma^2}{\ell_i\ell_j}[\sum_n w_n\omega_n z_{ni}z_{nj} +
\delta_{ij}\sum_n w_n\gamma_n]`; everything else materialises derivative blocks.

**Gradients with respect to hyperparameters.** Closed-form paths are differentiable (leave grad mode on), but
then every block's graph is kept: call under ``torch.no_grad()`` for large problems. Autograd leaves return
detached results.

**Shapes.** ``x`` ``(*batch, m, D)``, ``X`` ``(*batch, n, D)``, ``baselines`` ``(k, D)`` (or ``(D,)``); batch
dimensions broadcast with each other and with the kernel's ``batch_shape``. Work is done in blocks of about
``block_size`` elements, vectorised over whole blocks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from gpytorch.kernels import (
    Kernel,
)
from torch import Tensor

from ._derivative_leaves import _radial_profile
from ._kinks import (
    _NEAR,
    DEFAULT_KINK_TOL,
    _flat_owner,
    _graded,
    _Kink,
    _orders,
    _ravel,
    _Term,
    _term_kinks,
    _terms,
    _tol,
)
from ._path_pairs import _corner_rules, _pair_radial, _special_pairs, _tensor_rule
from ._quadrature import chunk_slices, gauss_legendre, numel
from .functionals import IntegratedGradientFunctional
from .kernel_derivatives import _as_baselines, _check_method, _owner_eval, _setup, default_block_size

__all__ = ["ig_cross", "ig_joint", "ig_point"]

#: Default Gauss–Legendre order of the 1-D path integrals (``ig_cross``).
DEFAULT_ORDER_1D = 32
#: Default Gauss–Legendre order per dimension of the 2-D path integrals (``ig_joint``, ``ig_point``).
DEFAULT_ORDER_2D = 24


# =====================================================================================================================
# Public: integrated gradients, 1-D paths
# =====================================================================================================================
def _finish(out: Tensor, return_error: bool) -> Tensor | tuple[Tensor, Tensor]:
    if return_error:
        return out[0], (out[0] - out[1]).abs()
    return out[0]


def ig_cross(
    kernel: Kernel,
    x: Tensor,
    baselines: Tensor | IntegratedGradientFunctional,
    X: Tensor,
    *,
    order: int = DEFAULT_ORDER_1D,
    return_error: bool = False,
    method: str = "auto",
    kink_tol: float = DEFAULT_KINK_TOL,
    block_size: int | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    r""":math:`\operatorname{Cov}(\mathrm{IG}_i f(\mathbf x_p), f(\mathbf X_j)) = \frac1k\sum_r \Delta_{pr,i}
    \int_0^1 \partial_i k(\mathbf b_r + t\boldsymbol\Delta_{pr}, \mathbf X_j)\,dt`, ``(*batch, m, D, n)``.

    Gauss–Legendre of ``order`` nodes; where a path crosses a data point inside a Matérn leaf's active dimensions
    the rule is split at the crossing (the integrand has a kink there).

    :param return_error: also return :math:`|I_N - I_{N/2}|` (same shape).
    :param kink_tol: relative distance under which a path counts as passing through a point.
    """
    _check_method(method)
    block_size = default_block_size(block_size)
    orders = _orders(order, return_error)
    bshape, (x, X) = _setup(kernel, x, X)
    b = _as_baselines(baselines, x)
    tol = _tol(kink_tol, x)
    m, dims, n, k = x.size(-2), x.size(-1), X.size(-2), b.size(0)
    rules = [gauss_legendre(q, x) for q in orders]
    nodes = torch.cat([r[0] for r in rules])
    nn = nodes.numel()
    weights = x.new_zeros(len(orders), nn)
    off = 0
    for i, (tq, wq) in enumerate(rules):
        weights[i, off : off + tq.numel()] = wq
        off += tq.numel()
    out = x.new_zeros(len(orders), *bshape, m, dims, n)
    nbat = numel(bshape)
    for term in _terms(kernel):
        _probe_term(term, x, method)
        kinks = _term_kinks(term, dims)
        radial = term.radial(method)
        per_point = k * nn * n * (2 if radial is not None else 3 * dims) * nbat
        for chunk in chunk_slices(m, per_point, block_size):
            p0, p1 = chunk.start, chunk.stop
            delta = x[..., p0:p1, None, :] - b  # (*B, P, k, D)
            if radial is not None:
                contrib = _cross_radial(radial, delta, b, X, nodes, weights)
            else:
                pts = b.unsqueeze(-2) + nodes[:, None] * delta.unsqueeze(-2)  # (*B, P, k, N, D)
                pts = pts.reshape(*bshape, -1, 1, dims)
                g1 = term.derivs(pts, X.unsqueeze(-3), 2, 1, method).g1
                g1 = g1.expand(*bshape, pts.size(-3), n, dims).reshape(*bshape, p1 - p0, k, nn, n, dims)
                contrib = torch.einsum("Rq,...prqjd,...prd->R...pdj", weights, g1, delta)
            out[..., p0:p1, :, :] += contrib / k
            if kinks:
                _cross_kink_correction(term, kinks, out, p0, delta, b, X, orders, method, tol, block_size)
    return _finish(out, return_error)


def _probe_term(term: _Term, x: Tensor, method: str) -> None:
    x0 = x.reshape(-1, x.size(-1))[:1]
    with torch.no_grad():
        term.derivs(x0, x0, 1, 2, method)


def _cross_radial(
    radial: tuple[Kernel, Tensor | None, Tensor | None],
    delta: Tensor,
    b: Tensor,
    X: Tensor,
    nodes: Tensor,
    weights: Tensor,
) -> Tensor:
    r"""Fast IG-cross block of a scaled radial leaf.

    With :math:`\mathbf z = (\mathbf b + t\boldsymbol\Delta - \mathbf X_j)/\boldsymbol\ell` and
    :math:`\partial_i k = \sigma^2\gamma(s) z_i/\ell_i`,

    .. math::

        \sum_q w_q \partial_i k(\mathbf a(t_q), \mathbf X_j) = \frac{\sigma^2}{\ell_i^2}\Big[(b_i - X_{ji})
        \sum_q w_q\gamma_{qj} + \Delta_i \sum_q w_q t_q \gamma_{qj}\Big],

    so only the scalar profile :math:`\gamma` is needed at the nodes (distances by ``cdist`` without the
    matmul expansion, i.e. exact differences).
    """
    leaf, dims, scale = radial
    nbat = delta.dim() - 3
    bshape = delta.shape[:nbat]
    p, k, full = delta.size(-3), delta.size(-2), delta.size(-1)
    if dims is not None:
        delta_s, b_s, X_s = delta.index_select(-1, dims), b.index_select(-1, dims), X.index_select(-1, dims)
    else:
        delta_s, b_s, X_s = delta, b, X
    ls = leaf.lengthscale[..., 0, :]  # (*kb, c)
    ls_b = ls.reshape(*ls.shape[:-1], 1, 1, 1, ls.size(-1))
    pts = (b_s.unsqueeze(-2) + nodes[:, None] * delta_s.unsqueeze(-2)) / ls_b  # (*B, P, k, N, d)
    nn = nodes.numel()
    pts = pts.expand(*bshape, p, k, nn, pts.size(-1)).reshape(*bshape, p * k * nn, pts.size(-1))
    Xl = (X_s / ls.unsqueeze(-2)).expand(*bshape, X.size(-2), pts.size(-1))
    r = torch.cdist(pts, Xl, compute_mode="donot_use_mm_for_euclid_dist")
    _, gamma, _ = _radial_profile(leaf, r.square(), 2, 1, r=r, value=False)
    gamma = gamma.expand(*bshape, p * k * nn, X.size(-2)).reshape(*bshape, p, k, nn, X.size(-2))
    s0 = torch.einsum("Rq,...prqj->R...prj", weights, gamma)
    s1 = torch.einsum("Rq,q,...prqj->R...prj", weights, nodes, gamma)
    # (1/ℓ_i²) Σ_r Δ_ri [(b_ri - X_ji) S0 + Δ_ri S1]
    t1 = torch.einsum("...pri,ri,R...prj->R...pij", delta_s, b_s, s0)
    t2 = torch.einsum("...pri,R...prj->R...pij", delta_s, s0) * X_s.transpose(-1, -2).unsqueeze(-3)
    t3 = torch.einsum("...pri,R...prj->R...pij", delta_s.square(), s1)
    inv = ls.square().reciprocal().reshape(*ls.shape[:-1], 1, ls.size(-1), 1)
    res = (t1 - t2 + t3) * inv
    if scale is not None:
        res = res * scale.reshape(*scale.shape, 1, 1, 1)
    if dims is None:
        return res
    return res.new_zeros(*res.shape[:-2], full, res.size(-1)).index_add(-2, dims, res)


def _cross_kink_correction(
    term: _Term,
    kinks: list[_Kink],
    out: Tensor,
    p0: int,
    delta: Tensor,
    b: Tensor,
    X: Tensor,
    orders: tuple[int, ...],
    method: str,
    tol: float,
    block_size: int,
) -> None:
    r"""Re-integrate (path, point) pairs whose path passes through or close to the point in a kink subspace.

    In lengthscale units of the Matérn leaf (columns :math:`S`), with :math:`\mathbf c = \mathbf b - \mathbf X_j`,
    :math:`\boldsymbol\alpha = \boldsymbol\Delta`, the closest approach is at :math:`t^* = -\mathbf c\cdot
    \boldsymbol\alpha/\|\boldsymbol\alpha\|^2` with distance :math:`d = \|\mathbf c + t^*\boldsymbol\alpha\|`.
    For :math:`t^* \in (\mathrm{tol}, 1 - \mathrm{tol})` and :math:`w = d/\|\boldsymbol\alpha\| <` ``_NEAR``
    the rule is split at :math:`t^*` (a kink if :math:`d \approx 0`) and, for :math:`d > 0`, graded around it
    (:func:`_graded`); the plain rule's contribution (already added) is subtracted.
    """
    nbat = delta.dim() - 3
    bshape = delta.shape[:nbat]
    P, k, dims = delta.size(-3), delta.size(-2), delta.size(-1)
    n = X.size(-2)
    shape = (*bshape, P, k, n)
    flat_parts, brk_parts = [], []
    for kink in kinks:
        alpha = kink.scaled(delta, 2)  # (*B, P, k, s)
        bS = kink.scaled(b.unsqueeze(0), 2).expand_as(alpha)  # (*B, P, k, s)
        XS = kink.scaled(X, 1)  # (*B, n, s)
        aa = alpha.square().sum(-1)  # (*B, P, k)
        ca = (bS * alpha).sum(-1).unsqueeze(-1) - torch.einsum("...js,...prs->...prj", XS, alpha)
        tstar = -ca / torch.where(aa > 0, aa, torch.ones_like(aa)).unsqueeze(-1)
        cand = (aa > 0).unsqueeze(-1) & (tstar > tol) & (tstar < 1 - tol)
        idx = cand.nonzero(as_tuple=True)
        if idx[0].numel() == 0:
            continue
        bidx = idx[:nbat]
        al = alpha[(*bidx, idx[nbat], idx[nbat + 1])]
        c = bS[(*bidx, idx[nbat], idx[nbat + 1])] - XS[(*bidx, idx[nbat + 2])]
        ts = tstar[idx]
        dist2 = (c + ts.unsqueeze(-1) * al).square().sum(-1)
        a2 = al.square().sum(-1)
        exact = dist2 <= tol**2 * torch.maximum(c.square().sum(-1), a2)
        width = (dist2 / a2).sqrt()
        near = exact | (width < _NEAR)
        if not bool(near.any()):
            continue
        sel = tuple(i[near] for i in idx)
        flat_parts.append(_ravel(sel, shape))
        brk_parts.append(_graded(ts[near], width[near], exact[near], tol))
    if not flat_parts:
        return
    # merge the kinks' breakpoints per special (path, point) pair
    flat = torch.cat(flat_parts)
    uniq, inv = torch.unique(flat, return_inverse=True)
    ns = uniq.numel()
    width_b = brk_parts[0].size(-1)
    bp = delta.new_ones(ns, len(brk_parts) * width_b)
    off = 0
    for i, part in enumerate(brk_parts):
        bp[inv[off : off + part.size(0)], i * width_b : (i + 1) * width_b] = part
        off += part.size(0)
    sidx = torch.unravel_index(uniq, shape)
    owner = _flat_owner(sidx[:nbat], bshape, ns, delta.device)
    pi, ri, ji = sidx[nbat], sidx[nbat + 1], sidx[nbat + 2]
    brk = bp.sort(-1).values
    brk = brk[:, : max(1, int((brk < 1).sum(-1).max()))]  # (Ns, M)
    edges = torch.cat([brk.new_zeros(ns, 1), brk, brk.new_ones(ns, 1)], -1)
    length = edges[:, 1:] - edges[:, :-1]  # (Ns, M+1)
    tl, wl = [], []
    for q in orders:
        tq, wq = gauss_legendre(q, delta)
        tl.append((edges[:, :-1, None] + length[..., None] * tq).reshape(ns, -1))
        wl.append((length[..., None] * wq).reshape(ns, -1))
        tl.append(tq.expand(ns, q))
        wl.append(-wq.expand(ns, q))
    nodes = torch.cat(tl, -1)  # (Ns, N)
    w = delta.new_zeros(len(orders), ns, nodes.size(-1))
    off = 0
    for i in range(len(orders)):
        for part in (wl[2 * i], wl[2 * i + 1]):
            w[i, :, off : off + part.size(-1)] = part
            off += part.size(-1)
    dflat = delta.reshape(-1, P, k, dims)
    Xflat = X.reshape(-1, n, dims)
    dsel = dflat[owner, pi, ri]  # (Ns, D)
    start = b[ri]  # (Ns, D)
    xj = Xflat[owner, ji]  # (Ns, D)
    oflat = out.reshape(out.size(0), -1, *out.shape[-3:])
    per = 3 * nodes.size(-1) * dims * max(1, numel(bshape))
    for chunk in chunk_slices(ns, per, block_size):
        c0, c1 = chunk.start, chunk.stop
        pts = start[c0:c1, None, :] + nodes[c0:c1, :, None] * dsel[c0:c1, None, :]
        g1 = _owner_eval(
            lambda a1, a2, npd: term.derivs(a1, a2, npd, 1, method),
            pts,
            xj[c0:c1, None, :],
            owner[c0:c1],
            bshape,
        ).g1  # (Ns, N, D)
        corr = torch.einsum("Rsn,snd->Rsd", w[:, c0:c1], g1) * dsel[c0:c1] / k
        dcol = torch.arange(dims, device=delta.device)
        index = (owner[c0:c1, None], pi[c0:c1, None] + p0, dcol, ji[c0:c1, None])
        for R in range(out.size(0)):
            oflat[R].index_put_(index, corr[R], accumulate=True)


# =====================================================================================================================
# Public: integrated gradients, 2-D path pairs
# =====================================================================================================================
def ig_joint(
    kernel: Kernel,
    x1: Tensor,
    baselines: Tensor | IntegratedGradientFunctional,
    x2: Tensor,
    baselines2: Tensor | IntegratedGradientFunctional | None = None,
    *,
    order: int = DEFAULT_ORDER_2D,
    return_error: bool = False,
    method: str = "auto",
    kink_tol: float = DEFAULT_KINK_TOL,
    block_size: int | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    r""":math:`\operatorname{Cov}(\mathrm{IG}_i f(\mathbf x_p), \mathrm{IG}_j f(\mathbf x'_q))`,
    ``(*batch, m1, D, m2, D)``.

    .. math::

        \frac{1}{k k'}\sum_{r,s} \Delta_{pr,i}\Delta'_{qs,j} \int_0^1\!\!\int_0^1 \partial_i\partial'_j
        k(\mathbf b_r + t\boldsymbol\Delta_{pr}, \mathbf b'_s + u\boldsymbol\Delta'_{qs})\,dt\,du,

    by tensor Gauss–Legendre (``order`` per dimension) for smooth terms and by Duffy-mapped triangles (split along
    the kinks, see the module docs) for Matérn terms. ``baselines2`` defaults to ``baselines``.
    """
    _check_method(method)
    block_size = default_block_size(block_size)
    orders = _orders(order, return_error)
    bshape, (x1, x2) = _setup(kernel, x1, x2)
    b1 = _as_baselines(baselines, x1)
    b2 = b1 if baselines2 is None else _as_baselines(baselines2, x1)
    m1, dims, m2 = x1.size(-2), x1.size(-1), x2.size(-2)
    k1, k2 = b1.size(0), b2.size(0)
    n2 = m2 * k2
    total = m1 * k1 * n2
    out = x1.new_zeros(len(orders), *bshape, m1 * m2, dims, dims)

    def pairs(f0: int, f1: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        f = torch.arange(f0, f1, device=x1.device)
        i1, i2 = f // n2, f % n2
        p, r, q, s = i1 // k1, i1 % k1, i2 // k2, i2 % k2
        return p, r, q, s, p * m2 + q

    _ig2(kernel, x1, b1, x2, b2, pairs, total, out, orders, method, _tol(kink_tol, x1), block_size)
    out = out.reshape(len(orders), *bshape, m1, m2, dims, dims).transpose(-2, -3) / (k1 * k2)
    return _finish(out, return_error)


def ig_point(
    kernel: Kernel,
    x: Tensor,
    baselines: Tensor | IntegratedGradientFunctional,
    *,
    order: int = DEFAULT_ORDER_2D,
    return_error: bool = False,
    method: str = "auto",
    kink_tol: float = DEFAULT_KINK_TOL,
    block_size: int | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Per-point blocks :math:`\operatorname{Cov}(\mathrm{IG}_i f(\mathbf x_p), \mathrm{IG}_j f(\mathbf x_p))`,
    ``(*batch, m, D, D)``.

    A path with itself has its kink on the diagonal :math:`t = u` and two baselines of the same point meet at
    :math:`(1, 1)`; both are integrated on Duffy-mapped triangles (module docs).
    """
    _check_method(method)
    block_size = default_block_size(block_size)
    orders = _orders(order, return_error)
    bshape, (x,) = _setup(kernel, x)
    b = _as_baselines(baselines, x)
    m, dims, k = x.size(-2), x.size(-1), b.size(0)
    out = x.new_zeros(len(orders), *bshape, m, dims, dims)

    def pairs(f0: int, f1: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        f = torch.arange(f0, f1, device=x.device)
        p, rs = f // (k * k), f % (k * k)
        return p, rs // k, p, rs % k, p

    _ig2(kernel, x, b, x, b, pairs, m * k * k, out, orders, method, _tol(kink_tol, x), block_size)
    return _finish(out / (k * k), return_error)


def _ig2(
    kernel: Kernel,
    x1: Tensor,
    b1: Tensor,
    x2: Tensor,
    b2: Tensor,
    pairs: Callable[[int, int], tuple[Tensor, Tensor, Tensor, Tensor, Tensor]],
    total: int,
    out: Tensor,
    orders: tuple[int, ...],
    method: str,
    tol: float,
    block_size: int,
) -> None:
    r"""Accumulate :math:`\Delta_i\Delta'_j\iint \partial_i\partial'_j k` of path pairs into ``out[R, *B, slot]``.

    ``pairs(f0, f1)`` gives, for flat pair indices ``f0:f1``, the first path's point and baseline ``(p, r)``, the
    second's ``(q, s)`` and the output slot.
    """
    nbat = x1.dim() - 2
    bshape = x1.shape[:nbat]
    dims = x1.size(-1)
    nrule = len(orders)
    oflat = out.reshape(nrule, *bshape, -1, dims, dims)
    for term in _terms(kernel):
        _probe_term(term, x1, method)
        kinks = _term_kinks(term, dims)
        radial = term.radial(method)
        # nodes per pair (upper bound for the kink-free count; breakpoints add panels)
        per_node = (4 * dims if radial is not None else 8 * dims * dims) * numel(bshape)
        npair_nodes = sum((2 if kinks else 1) * q * q for q in orders)
        for chunk in chunk_slices(total, per_node * npair_nodes * (1 + len(kinks)), block_size):
            f0, f1 = chunk.start, chunk.stop
            p, r, q, s, slot = pairs(f0, f1)
            start1, start2 = b1[r], b2[s]  # (Pc, D)
            d1 = x1.index_select(-2, p) - start1  # (*B, Pc, D)
            d2 = x2.index_select(-2, q) - start2
            if kinks:
                T, U, W, special, feats = _corner_rules(start1 - start2, d1, d2, kinks, orders, tol)
            else:
                T, U, W = _tensor_rule(orders, x1)
                special, feats = None, None
            W = W.expand(nrule, *bshape, d1.size(-2), W.size(-1))
            if radial is not None:
                res = _pair_radial(radial, start1 - start2, d1, d2, T, U, W)
            else:
                a1 = start1.unsqueeze(-2) + T.unsqueeze(-1) * d1.unsqueeze(-2)
                a2 = start2.unsqueeze(-2) + U.unsqueeze(-1) * d2.unsqueeze(-2)
                h = term.derivs(a1, a2, 2, 2, method).h  # (*B, Pc, N, D, D)
                res = torch.einsum("R...pn,...pnij->R...pij", W, h)
            res = res * (d1.unsqueeze(-1) * d2.unsqueeze(-2))
            if special is not None and special.any():
                _special_pairs(term, method, res, special, feats, start1, start2, d1, d2, orders, block_size)
            oflat.index_add_(nbat + 1, slot, res)
