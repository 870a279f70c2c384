#!/usr/bin/env python3
r"""Pairs of straight paths on the unit square :math:`(t, u)`: tensor Gauss–Legendre rules, the singular features
of a pair (kink points and lines), Duffy corner rules, the radial fast path, and the explicit triangulation of
the remaining special pairs. Used by :mod:`gpytorch_explain.attribution.path_integrals`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from gpytorch.kernels import (
    Kernel,
)
from torch import Tensor

from ._derivative_leaves import _radial_profile, _row
from ._kinks import _NEAR, _flat_owner, _graded_np, _Kink, _Term
from ._polygon import _triangulate
from ._quadrature import chunk_slices, gauss_legendre, gauss_legendre_np, numel
from .kernel_derivatives import _owner_eval

#: Duffy corners in order of preference: (t, u) = (0, 0), (1, 1), (0, 1), (1, 0).
_CORNERS = ((0.0, 0.0), (1.0, 1.0), (0.0, 1.0), (1.0, 0.0))


def _tensor_rule(orders: tuple[int, ...], like: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Tensor GL rules on the unit square (shared by all pairs): ``T, U (1, N)``, ``W (R, 1, N)``."""
    ts, us, ws = [], [], []
    for q in orders:
        tq, wq = gauss_legendre(q, like)
        ts.append(tq.repeat_interleave(q))
        us.append(tq.repeat(q))
        ws.append((wq[:, None] * wq[None, :]).reshape(-1))
    T, U = torch.cat(ts)[None], torch.cat(us)[None]
    W = like.new_zeros(len(orders), 1, T.size(-1))
    off = 0
    for i, w in enumerate(ws):
        W[i, 0, off : off + w.numel()] = w
        off += w.numel()
    return T, U, W


@dataclass
class _Features:
    r"""Singular features of path pairs per kink: points ``(*B, P, M, 2)`` and lines ``A t + B u + C = 0``.

    Points are exact crossings or near-misses (``is_near``; distance ``dist`` in lengthscale units); ``gram`` holds
    :math:`(\|\boldsymbol\alpha\|^2, \|\boldsymbol\beta\|^2, \boldsymbol\alpha\cdot\boldsymbol\beta)`.
    """

    is_point: Tensor  # (*B, P, M)
    point: Tensor  # (*B, P, M, 2)
    is_line: Tensor  # (*B, P, M)
    line: Tensor  # (*B, P, M, 3)
    is_near: Tensor  # (*B, P, M)
    dist: Tensor  # (*B, P, M)
    gram: Tensor  # (*B, P, M, 3)
    alpha: list[Tensor]  # per kink, scaled path directions (*B, P, s)
    beta: list[Tensor]


def _pair_features(c: Tensor, d1: Tensor, d2: Tensor, kinks: list[_Kink], tol: float) -> _Features:
    r"""Where :math:`P_S(\mathbf c + t\boldsymbol\alpha - u\boldsymbol\beta) = 0` in :math:`[0,1]^2`.

    :math:`\mathbf c = \mathbf b - \mathbf b'`, :math:`\boldsymbol\alpha = \boldsymbol\Delta`,
    :math:`\boldsymbol\beta = \boldsymbol\Delta'` (lengthscale units of each kink). Non-parallel
    :math:`\boldsymbol\alpha, \boldsymbol\beta`: least-squares :math:`(t^*, u^*)` (a point if the residual
    vanishes); parallel and collinear with :math:`\mathbf c`: the line :math:`(\boldsymbol\alpha\cdot\mathbf v)t
    - (\boldsymbol\beta\cdot\mathbf v)u + \mathbf c\cdot\mathbf v = 0` (:math:`\mathbf v` the common unit
    direction), kept if it cuts the open square.
    """
    c = c.expand_as(d1)
    pts, ispt, lines, isln, alphas, betas = [], [], [], [], [], []
    isnear, dists, grams = [], [], []
    tiny = torch.finfo(c.dtype).tiny
    for kink in kinks:
        cs, al, be = kink.scaled(c, 1), kink.scaled(d1, 1), kink.scaled(d2, 1)
        cs, al, be = torch.broadcast_tensors(cs, al, be)
        alphas.append(al)
        betas.append(be)
        aa, bb, ab = (al * al).sum(-1), (be * be).sum(-1), (al * be).sum(-1)
        ca, cb = (cs * al).sum(-1), (cs * be).sum(-1)
        cc = (cs * cs).sum(-1)
        scale2 = torch.maximum(torch.maximum(aa, bb), cc)
        det = aa * bb - ab * ab
        nonpar = (det > 1e-14 * aa * bb) & (aa > 0) & (bb > 0)
        dsafe = torch.where(nonpar, det, torch.ones_like(det))
        ts = (ab * cb - ca * bb) / dsafe
        us = (aa * cb - ab * ca) / dsafe
        e = cs + ts.unsqueeze(-1) * al - us.unsqueeze(-1) * be
        inside = (ts >= -tol) & (ts <= 1 + tol) & (us >= -tol) & (us <= 1 + tol)
        point = nonpar & inside & (e.square().sum(-1) <= tol**2 * scale2) & (scale2 > tiny)
        pts.append(torch.stack([ts.clamp(0, 1), us.clamp(0, 1)], -1))
        ispt.append(point)
        use_a = aa >= bb
        vn = torch.where(use_a, aa, bb).clamp_min(tiny).sqrt()
        v = torch.where(use_a.unsqueeze(-1), al, be) / vn.unsqueeze(-1)
        A, Bc, C = (al * v).sum(-1), -(be * v).sum(-1), (cs * v).sum(-1)
        resid = (cs - C.unsqueeze(-1) * v).square().sum(-1)
        fvals = torch.stack([C, A + Bc + C, Bc + C, A + C], -1)
        fs = (A.abs() + Bc.abs() + C.abs()).unsqueeze(-1)
        cuts = (fvals > tol * fs).any(-1) & (fvals < -tol * fs).any(-1)
        line = ~nonpar & (torch.maximum(aa, bb) > tiny) & (resid <= tol**2 * scale2) & cuts
        lines.append(torch.stack([A, Bc, C], -1))
        isln.append(line)
        # closest points of the two segments (clamped least squares)
        aas, bbs = torch.where(aa > 0, aa, torch.ones_like(aa)), torch.where(bb > 0, bb, torch.ones_like(bb))
        tc = torch.where(nonpar, ts.clamp(0, 1), torch.zeros_like(ts))
        uc = (ab * tc + cb) / bbs
        tc = torch.where(uc < 0, (-ca / aas).clamp(0, 1), torch.where(uc > 1, ((ab - ca) / aas).clamp(0, 1), tc))
        uc = uc.clamp(0, 1)
        dist2 = (cs + tc.unsqueeze(-1) * al - uc.unsqueeze(-1) * be).square().sum(-1)
        near = (aa > 0) & (bb > 0) & ~point & ~line & (dist2 < _NEAR**2 * torch.maximum(aa, bb))
        near = near & (dist2 > tol**2 * scale2)
        pts[-1] = torch.where(near.unsqueeze(-1), torch.stack([tc, uc], -1), pts[-1])
        isnear.append(near)
        dists.append(torch.where(near, dist2.sqrt(), torch.zeros_like(dist2)))
        grams.append(torch.stack([aa, bb, ab], -1))
    return _Features(
        torch.stack(ispt, -1) | torch.stack(isnear, -1),
        torch.stack(pts, -2),
        torch.stack(isln, -1),
        torch.stack(lines, -2),
        torch.stack(isnear, -1),
        torch.stack(dists, -1),
        torch.stack(grams, -2),
        alphas,
        betas,
    )


def _corner_rules(
    c: Tensor, d1: Tensor, d2: Tensor, kinks: list[_Kink], orders: tuple[int, ...], tol: float
) -> tuple[Tensor, Tensor, Tensor, Tensor, _Features]:
    r"""Per-pair Duffy rules collapsed at a singular corner, with :math:`\eta`-panels at (near-)kinks.

    Corner :math:`\boldsymbol\kappa` with orientation :math:`\boldsymbol\sigma = 1 - 2\boldsymbol\kappa`:
    triangle 1 is :math:`(t, u) = \boldsymbol\kappa + \boldsymbol\sigma\odot(\xi, \xi\eta)`, triangle 2
    :math:`\boldsymbol\kappa + \boldsymbol\sigma\odot(\xi\eta, \xi)`, weight :math:`w_\xi w_\eta \xi`. For a kink
    singular at the corner the distance is :math:`r = \xi\rho_1(\eta)`, :math:`\rho_1(\eta) = \|\sigma_t
    \boldsymbol\alpha - \eta\sigma_u\boldsymbol\beta\|` (triangle 1; :math:`\|\eta\sigma_t\boldsymbol\alpha -
    \sigma_u\boldsymbol\beta\|` on triangle 2), smooth unless the paths are (nearly) parallel: then
    :math:`\rho` (nearly) vanishes at its minimiser :math:`\eta^* = \sigma_t\sigma_u\,\boldsymbol\alpha\cdot
    \boldsymbol\beta/\|\boldsymbol\beta\|^2`. Exactly parallel paths give the kink line :math:`t = cu` through
    the corner, where the :math:`\eta` range is split. Pairs whose features are not all at one corner, nearly
    parallel pairs (:math:`\rho_{\min}/\|\boldsymbol\beta\| <` ``_NEAR``, graded there) and near-misses are
    flagged ``special`` (weights zero here; see :func:`_special_pairs`).
    """
    feats = _pair_features(c, d1, d2, kinks, tol)
    corners = torch.tensor(_CORNERS, dtype=d1.dtype, device=d1.device)  # (4, 2)
    at_corner = ((feats.point.unsqueeze(-2) - corners).abs() <= tol).all(-1)  # (*B, P, M, 4)
    A, Bc, C = feats.line.unbind(-1)
    fvals = A.unsqueeze(-1) * corners[:, 0] + Bc.unsqueeze(-1) * corners[:, 1] + C.unsqueeze(-1)
    fs = (A.abs() + Bc.abs() + C.abs()).unsqueeze(-1)
    on_line = fvals.abs() <= tol * fs  # (*B, P, M, 4)
    sing = (feats.is_point.unsqueeze(-1) & at_corner) | (feats.is_line.unsqueeze(-1) & on_line)
    has = feats.is_point | feats.is_line  # (*B, P, M)
    allowed = torch.where(has.unsqueeze(-1), sing, torch.ones_like(sing)).all(-2)  # (*B, P, 4)
    zero_path = (d1.abs().amax(-1) == 0) | (d2.abs().amax(-1) == 0)
    special = (~allowed.any(-1) | feats.is_near.any(-1)) & ~zero_path
    kappa = torch.where(special | zero_path, torch.zeros_like(special, dtype=torch.long), allowed.long().argmax(-1))
    kt, ku = corners[kappa, 0], corners[kappa, 1]  # (*B, P)
    st, su = 1 - 2 * kt, 1 - 2 * ku
    sing_k = torch.gather(sing, -1, kappa[..., None, None].expand(*kappa.shape, sing.size(-2), 1))[..., 0]
    # parallel breakpoints per kink singular at the chosen corner; nearly parallel pairs go to the special path
    br1, br2 = [], []
    near_parallel = torch.zeros_like(special)
    for mi, (al, be) in enumerate(zip(feats.alpha, feats.beta, strict=True)):
        use = sing_k[..., mi] & ~special & ~zero_path
        sa, sb = st.unsqueeze(-1) * al, su.unsqueeze(-1) * be
        for first, second, store in ((sa, sb, br1), (sb, sa, br2)):
            # triangle 1: ρ(η) = |sa - η sb|; triangle 2: ρ(η) = |η sa - sb| = |sb - η sa|
            nn_ = second.square().sum(-1)
            eta = (first * second).sum(-1) / torch.where(nn_ > 0, nn_, torch.ones_like(nn_))
            rmin2 = (first - eta.unsqueeze(-1) * second).square().sum(-1)
            width = (rmin2 / torch.where(nn_ > 0, nn_, torch.ones_like(nn_))).sqrt()
            exact = rmin2 <= tol**2 * torch.maximum(first.square().sum(-1), nn_)
            inside = use & (nn_ > 0) & (eta > tol) & (eta < 1 - tol)
            near_parallel |= inside & ~exact & (width < _NEAR)
            store.append(torch.where(inside & exact, eta, torch.ones_like(eta)).unsqueeze(-1))
    special = special | near_parallel
    eta1 = torch.where(special.unsqueeze(-1), 1.0, torch.cat(br1, -1)).sort(-1).values
    eta2 = torch.where(special.unsqueeze(-1), 1.0, torch.cat(br2, -1)).sort(-1).values
    nb = max(int((eta1 < 1).sum(-1).max()), int((eta2 < 1).sum(-1).max())) if eta1.numel() else 0
    eta1, eta2 = eta1[..., :nb], eta2[..., :nb]
    Ts, Us, Ws = [], [], []
    for qi, q in enumerate(orders):
        xi, wxi = gauss_legendre(q, d1)
        for tri, eta in ((1, eta1), (2, eta2)):
            edges = torch.cat([eta.new_zeros(*eta.shape[:-1], 1), eta, eta.new_ones(*eta.shape[:-1], 1)], -1)
            length = edges[..., 1:] - edges[..., :-1]  # (*B, P, nb+1)
            en = (edges[..., :-1, None] + length[..., None] * xi).flatten(-2)  # (*B, P, (nb+1) q)
            we = (length[..., None] * wxi).flatten(-2)
            xcol = xi[:, None]
            tau = xcol.expand(q, en.size(-1)) if tri == 1 else xcol * en.unsqueeze(-2)
            nu = xcol * en.unsqueeze(-2) if tri == 1 else xcol.expand(q, en.size(-1))
            w = (wxi[:, None] * xi[:, None]) * we.unsqueeze(-2)
            t = kt[..., None, None] + st[..., None, None] * tau
            u = ku[..., None, None] + su[..., None, None] * nu
            Ts.append(t.flatten(-2))
            Us.append(u.flatten(-2))
            Ws.append((qi, w.flatten(-2)))
    T, U = torch.cat(Ts, -1), torch.cat(Us, -1)
    W = T.new_zeros(len(orders), *T.shape)
    off = 0
    for qi, w in Ws:
        W[qi, ..., off : off + w.size(-1)] = w
        off += w.size(-1)
    W = W * (~special).unsqueeze(-1)
    return T, U, W, special, feats


def _pair_radial(
    radial: tuple[Kernel, Tensor | None, Tensor | None],
    c: Tensor,
    d1: Tensor,
    d2: Tensor,
    T: Tensor,
    U: Tensor,
    W: Tensor,
) -> Tensor:
    r"""Fast IG-pair block of a scaled radial leaf:
    :math:`\sum_n w_n \partial_i\partial'_j k = -\frac{\sigma^2}{\ell_i\ell_j}\big[\sum_n w_n\omega_n z_{ni}z_{nj}
    + \delta_{ij}\sum_n w_n\gamma_n\big]`, :math:`\mathbf z_n = (\mathbf c + t_n\boldsymbol\alpha -
    u_n\boldsymbol\beta)/\boldsymbol\ell`."""
    leaf, dims, scale = radial
    full = d1.size(-1)
    if dims is not None:
        c, d1, d2 = c.index_select(-1, dims), d1.index_select(-1, dims), d2.index_select(-1, dims)
    ls = _row(leaf.lengthscale, 1)  # (*kb, 1, c)
    z = (c.unsqueeze(-2) + T.unsqueeze(-1) * d1.unsqueeze(-2) - U.unsqueeze(-1) * d2.unsqueeze(-2)) / ls.unsqueeze(-2)
    s = z.square().sum(-1)
    _, gamma, omega = _radial_profile(leaf, s, 2, 2, value=False)
    zz = torch.einsum("R...pn,...pni,...pnj->R...pij", W * omega, z, z)
    gsum = (W * gamma).sum(-1)
    eye = torch.eye(z.size(-1), dtype=z.dtype, device=z.device)
    lsl = ls.unsqueeze(-1) * ls.unsqueeze(-2)  # (*kb, 1, c, c)
    res = -(zz + gsum[..., None, None] * eye) / lsl
    if scale is not None:
        res = res * scale.reshape(*scale.shape, 1, 1, 1)
    if dims is None:
        return res
    res = res.new_zeros(*res.shape[:-2], full, res.size(-1)).index_add(-2, dims, res)
    return res.new_zeros(*res.shape[:-1], full).index_add(-1, dims, res)


def _panel_rule(breaks: list[float], order: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite GL on [0, 1] with panels at ``breaks``."""
    xi, w = gauss_legendre_np(order)
    edges = np.array([0.0, *breaks, 1.0])
    lengths = np.diff(edges)
    nodes = (edges[:-1, None] + lengths[:, None] * xi).ravel()
    weights = (lengths[:, None] * w).ravel()
    return nodes, weights


def _triangle_nodes(tris: list, order: int, info: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Collapsed GL on triangles :math:`(V_0, V_1, V_2)`: :math:`V_0 + \xi(V_1 - V_0) + \xi\eta(V_2 - V_1)`,
    Jacobian :math:`\xi|\det(V_1 - V_0, V_2 - V_1)|`.

    If the apex is a (near-)singular point with distance :math:`d` and Gram matrix :math:`G` (``info``), the
    distance is :math:`r^2 = d^2 + \xi^2\rho(\eta)^2`, :math:`\rho(\eta)^2 = \mathbf e(\eta)^\top G\,\mathbf
    e(\eta)`: :math:`\eta` is split and graded around the minimiser of :math:`\rho` when that is small (nearly
    parallel paths), :math:`\xi` graded from the apex at :math:`d/\rho_{\min}` when :math:`d > 0`.
    """
    ts, us, ws = [], [], []
    for (v0, v1, v2), apex in tris:
        v0, v1, v2 = np.asarray(v0), np.asarray(v1), np.asarray(v2)
        e1, e2 = v1 - v0, v2 - v1
        jac = abs(e1[0] * e2[1] - e1[1] * e2[0])
        eta_breaks: list[float] = []
        xi_breaks: list[float] = []
        if apex is not None:
            dist, gram = info[apex]
            g = np.array([[gram[0], -gram[2]], [-gram[2], gram[1]]])  # (t, u) -> α t - β u

            def rho2(eta: float, g: np.ndarray = g, e1: np.ndarray = e1, e2: np.ndarray = e2) -> float:
                e = e1 + eta * e2
                return float(e @ g @ e)

            a2 = float(e2 @ g @ e2)
            lo = min(rho2(0.0), rho2(1.0))
            if a2 > 0:
                eta_star = -float(e1 @ g @ e2) / a2
                if 0.0 < eta_star < 1.0:
                    rmin2 = max(rho2(eta_star), 0.0)
                    lo = min(lo, rmin2)
                    width = math.sqrt(rmin2 / a2)
                    if width < _NEAR:
                        eta_breaks = _graded_np(eta_star, width)
            if dist > 0 and lo > 0:
                xi_breaks = _graded_np(0.0, dist / math.sqrt(lo), lo_only=True)
        xn, xw = _panel_rule(xi_breaks, order)
        en, ew = _panel_rule(eta_breaks, order)
        X, E = np.meshgrid(xn, en, indexing="ij")
        WW = np.outer(xw, ew) * X * jac
        ts.append((v0[0] + X * e1[0] + X * E * e2[0]).ravel())
        us.append((v0[1] + X * e1[1] + X * E * e2[1]).ravel())
        ws.append(WW.ravel())
    return np.concatenate(ts), np.concatenate(us), np.concatenate(ws)


def _special_pairs(
    term: _Term,
    method: str,
    res: Tensor,
    special: Tensor,
    feats: _Features,
    start1: Tensor,
    start2: Tensor,
    d1: Tensor,
    d2: Tensor,
    orders: tuple[int, ...],
    block_size: int,
) -> None:
    """Integrate pairs with interior crossings / non-corner kink lines on an explicit triangulation (in place)."""
    nbat = d1.dim() - 2
    bshape = d1.shape[:nbat]
    dims = d1.size(-1)
    sidx = special.nonzero(as_tuple=True)
    owner = _flat_owner(sidx[:nbat], bshape, sidx[0].numel(), d1.device)
    pidx = sidx[nbat]
    is_pt, pts = feats.is_point[sidx].cpu().numpy(), feats.point[sidx].cpu().double().numpy()
    is_ln, lns = feats.is_line[sidx].cpu().numpy(), feats.line[sidx].cpu().double().numpy()
    dist, gram = feats.dist[sidx].cpu().double().numpy(), feats.gram[sidx].cpu().double().numpy()
    nodes_t, nodes_u, nodes_w, own = [], [], [], []
    for i in range(owner.numel()):
        keep = [j for j in range(pts.shape[1]) if is_pt[i, j]]
        points = [tuple(pts[i, j]) for j in keep]
        info = [(float(dist[i, j]), gram[i, j]) for j in keep]
        lines = [tuple(lns[i, j]) for j in range(lns.shape[1]) if is_ln[i, j]]
        tris = _triangulate(points, lines, 1e-12)
        tl, ul, wl = [], [], []
        for ri, q in enumerate(orders):
            t, u, w = _triangle_nodes(tris, q, info)
            wr = np.zeros((len(orders), t.size))
            wr[ri] = w
            tl.append(t)
            ul.append(u)
            wl.append(wr)
        nodes_t.append(np.concatenate(tl))
        nodes_u.append(np.concatenate(ul))
        nodes_w.append(np.concatenate(wl, axis=1))
        own.append(np.full(nodes_t[-1].size, i))
    T = torch.as_tensor(np.concatenate(nodes_t), dtype=d1.dtype, device=d1.device)
    U = torch.as_tensor(np.concatenate(nodes_u), dtype=d1.dtype, device=d1.device)
    Wn = torch.as_tensor(np.concatenate(nodes_w, axis=1), dtype=d1.dtype, device=d1.device)  # (R, N)
    which = torch.as_tensor(np.concatenate(own), dtype=torch.long, device=d1.device)
    d1f = d1.reshape(-1, *d1.shape[nbat:])[owner, pidx]  # (Ns, D)
    d2f = d2.reshape(-1, *d2.shape[nbat:])[owner, pidx]
    acc = res.new_zeros(len(orders), owner.numel(), dims, dims)
    for chunk in chunk_slices(T.numel(), 8 * dims * dims * max(1, numel(bshape)), block_size):
        c0, c1 = chunk.start, chunk.stop
        wi = which[c0:c1]
        a1 = start1[pidx[wi]] + T[c0:c1, None] * d1f[wi]
        a2 = start2[pidx[wi]] + U[c0:c1, None] * d2f[wi]
        h = _owner_eval(
            lambda x1, x2, npd: term.derivs(x1, x2, npd, 2, method),
            a1.unsqueeze(1),
            a2.unsqueeze(1),
            owner[wi],
            bshape,
        ).h[:, 0]  # (Nc, D, D)
        for R in range(len(orders)):
            acc[R].index_add_(0, wi, Wn[R, c0:c1, None, None] * h)
    acc = acc * (d1f.unsqueeze(-1) * d2f.unsqueeze(-2))
    res[(slice(None), *sidx)] = acc
