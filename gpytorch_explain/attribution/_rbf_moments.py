#!/usr/bin/env python3
r"""Scalar moments behind the closed-form RBF integrated-gradient covariances of
:mod:`gpytorch_explain.attribution.rbf`: the segment moments :math:`I_p = \int_0^1 t^p e^{-q(t)}\,dt`,
the self-moments of a path with itself, and the IG–IG pair blocks (outer composite Gauss–Legendre rule planned
from the path lengths). The derivations and accuracy are stated in the docstring of that module.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..settings import block_budget
from ._quadrature import chunk_slices, gauss_legendre

_SQRT_PI_2 = math.sqrt(math.pi) / 2

#: Gauss–Legendre nodes of the short-segment rule of :func:`_segment_moments`.
_SEG_NODES = 32
#: Gauss–Legendre nodes per panel of the outer rule of :func:`_pair_moments`.
_PAIR_NODES = 16
#: Outer panels are at most this many Gaussian widths :math:`1/\|\boldsymbol\delta_o\|` wide ...
_PANEL_WIDTH = 3.0
#: ... and the exponent may change by at most this much across one of them.
_PANEL_RISE = 8.0
#: Outer contributions below :math:`e^{-T}` times the peak of the integrand are dropped.
_PAIR_TAIL = 50.0
#: Hard cap on the number of outer panels (reached only for :math:`\|\boldsymbol\delta\| \gtrsim 3000`).
_MAX_PANELS = 1024


def _chunks(m: int, per_row: int) -> list[slice]:
    """Slices of ``m`` rows within the element budget ``max_block_elements // 4`` (``[slice(0, 0)]`` when ``m``
    is 0)."""
    return chunk_slices(m, per_row, block_budget("rbf_moments")) or [slice(0, 0)]


def _switch_h(dtype: torch.dtype) -> float:
    r"""Segment half-width :math:`h = \sqrt{A/2}` below which :func:`_segment_moments` switches to quadrature.

    The closed forms of :math:`I_1, I_2` divide by :math:`A`, losing about :math:`\log_{10}(1/A^{3/2})` digits;
    the quadrature is exact to rounding while :math:`|B| \le h\sqrt{2C} \lesssim 28` (beyond that
    :math:`e^{-q}` underflows anyway).
    """
    return 0.15 if dtype == torch.float64 else 0.6


# =============================================================================================
# segment moments
# =============================================================================================
def _segment_moments(A: Tensor, B: Tensor, C: Tensor, lo: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    r"""Moments :math:`I_p = \int_{l}^{l+1} t^p e^{-q(t)}\, dt`, :math:`p = 0, 1, 2`, of
    :math:`q(t) = \tfrac12 (A t^2 + 2 B t + C)`, for :math:`A \ge 0`, :math:`AC \ge B^2` (broadcast), over the unit
    interval starting at :math:`l` = ``lo`` (default 0; a shifted interval lets callers take moments about a
    point of their choice, which avoids cancelling large moments against each other).

    Below, :math:`[0, 1]` stands for :math:`[l, l + 1]`; the formulas are written for :math:`l = 0`.

    **Long segments** (:math:`h = \sqrt{A/2} \ge h_\star`, see :func:`_switch_h`). Completing the square,
    :math:`q(t) = (h t + s_0)^2 + c'` with :math:`s_0 = B / \sqrt{2A}`, :math:`s_1 = s_0 + h`,
    :math:`c' = \tfrac12 (C - B^2/A) \ge 0`, so :math:`I_0 = \frac{e^{-c'}}{h} \int_{s_0}^{s_1} e^{-s^2}\, ds`.
    With :math:`q_0 = q(0) = C/2`, :math:`q_1 = q(1) = (A + 2B + C)/2` and
    :math:`\operatorname{erfcx}(s) = e^{s^2} \operatorname{erfc}(s)` (bounded for :math:`s \ge 0`):

    * :math:`s_0 \ge 0`: :math:`I_0 = \frac{\sqrt\pi}{2h}
      \big[e^{-q_0} \operatorname{erfcx}(s_0) - e^{-q_1} \operatorname{erfcx}(s_1)\big]`;
    * :math:`s_1 < 0`: the mirror image, :math:`I_0 = \frac{\sqrt\pi}{2h}
      \big[e^{-q_1} \operatorname{erfcx}(-s_1) - e^{-q_0} \operatorname{erfcx}(-s_0)\big]`;
    * :math:`s_0 < 0 \le s_1`: :math:`I_0 = \frac{\sqrt\pi}{2h}
      \big[2e^{-c'} - e^{-q_0} \operatorname{erfcx}(-s_0) - e^{-q_1} \operatorname{erfcx}(s_1)\big]`
      (:math:`= \frac{\sqrt\pi}{2h} e^{-c'} [\operatorname{erf}(s_1) - \operatorname{erf}(s_0)]`).

    No term overflows, and the differences cancel by at most a factor :math:`\sim 1/h`. Integrating
    :math:`\frac{d}{dt}e^{-q} = -(At + B)e^{-q}` against :math:`1` and :math:`t` gives

    .. math::

        I_1 = \frac{e^{-q_0} - e^{-q_1} - B I_0}{A}, \qquad I_2 = \frac{I_0 - e^{-q_1} - B I_1}{A}

    (for general :math:`l`: :math:`I_2 = (I_0 + l e^{-q(l)} - (l + 1) e^{-q(l+1)} - B I_1)/A`).

    **Short segments** (:math:`h < h_\star`). The recurrences cancel like :math:`1/A`; instead a fixed
    32-point Gauss–Legendre rule on :math:`t \in [0, 1]` is used. Its integrand is :math:`e^{-C/2}` times
    :math:`e^{-Bt - At^2/2}` with :math:`A < 2h_\star^2` and :math:`|B| \le \sqrt{AC}`, which the rule integrates to
    rounding whenever the result does not underflow. :math:`A = B = 0` (a segment of length zero) is exact.

    The branches are selected with sanitised inputs, so values and gradients are finite everywhere.
    """
    if lo is None:
        A, B, C = torch.broadcast_tensors(A, B, C)
    else:
        A, B, C, lo = torch.broadcast_tensors(A, B, C, lo)
        lo = lo.reshape(-1)
    shape = A.shape
    A, B, C = A.reshape(-1), B.reshape(-1), C.reshape(-1)
    h_switch = _switch_h(A.dtype)
    a_switch = 2 * h_switch * h_switch
    small = A < a_switch
    idx = small.nonzero().squeeze(-1)
    # dead-branch sanitising: A_s ≥ A keeps q ≥ 0 (AC ≥ B² ⇒ A_s C ≥ B²), so nothing overflows there
    A_s = torch.where(small, torch.full_like(A, a_switch), A) if idx.numel() else A
    h = torch.sqrt(0.5 * A_s)
    if lo is None:
        s0 = B / (2 * h)
        e0 = torch.exp(-0.5 * C)
        e1 = torch.exp(-0.5 * A_s - B - 0.5 * C)
    else:
        s0 = h * lo + B / (2 * h)
        e0 = torch.exp(-0.5 * (A_s * lo * lo + 2 * B * lo + C))
        hi = lo + 1
        e1 = torch.exp(-0.5 * (A_s * hi * hi + 2 * B * hi + C))
    s1 = s0 + h
    # e^{-c'} erfc(s) = e^{-q} erfcx(s) for s ≥ 0 and 2 e^{-c'} − e^{-q} erfcx(−s) for s < 0
    neg0, neg1 = s0 < 0, s1 < 0
    t0 = e0 * torch.special.erfcx(torch.where(neg0, -s0, s0))
    t1 = e1 * torch.special.erfcx(torch.where(neg1, -s1, s1))
    J = torch.where(neg0, -t0, t0) - torch.where(neg1, -t1, t1)
    mid = neg0 & ~neg1  # the Gaussian's centre lies inside the segment: add the 2 e^{-c'} (no cancellation)
    if bool(mid.any()):
        cprime = (0.5 * (C - B * B / A_s)).clamp_min(0)
        J = J + torch.where(mid, 2 * torch.exp(-cprime), torch.zeros_like(cprime))
    I0 = (_SQRT_PI_2 / h) * J
    I1 = (e0 - e1 - B * I0) / A_s
    I2 = (I0 - e1 - B * I1) / A_s if lo is None else (I0 + lo * e0 - hi * e1 - B * I1) / A_s
    if idx.numel():
        g = _segment_moments_quadrature(A[idx], B[idx], C[idx], None if lo is None else lo[idx])
        I0, I1, I2 = (I.index_put((idx,), gi) for I, gi in zip((I0, I1, I2), g, strict=True))
    return I0.reshape(shape), I1.reshape(shape), I2.reshape(shape)


def _segment_moments_quadrature(A: Tensor, B: Tensor, C: Tensor, lo: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    r""":math:`I_{0,1,2}` of :func:`_segment_moments` by the 32-point Gauss–Legendre rule (1-D inputs)."""
    t, w = gauss_legendre(_SEG_NODES, A)
    outs: list[tuple[Tensor, Tensor, Tensor]] = []
    for sl in _chunks(A.numel(), _SEG_NODES * 8):
        a, b, c = A[sl, None], B[sl, None], C[sl, None]
        v = t if lo is None else lo[sl, None] + t
        e = w * torch.exp(-(c / 2 + v * (b + a * v / 2)))
        ev = e * v
        outs.append((e.sum(-1), ev.sum(-1), (ev * v).sum(-1)))
    return tuple(torch.cat(o) for o in zip(*outs, strict=True))  # type: ignore[return-value]


def _self_moments(a: Tensor) -> tuple[Tensor, Tensor]:
    r"""Unit-square integrals of a path with itself (the variance case).

    With :math:`\tau = s - t` the double integrals over :math:`[0, 1]^2` of functions of :math:`\tau` collapse to
    :math:`\int_{-1}^1 (1 - |\tau|)\, g(\tau)\, d\tau`; this returns

    .. math::

        K_0 = 2\int_0^1 (1 - \tau) e^{-a\tau^2/2}\, d\tau = 2(J_0 - J_1), \qquad
        K_2 = 2\int_0^1 (1 - \tau)\tau^2 e^{-a\tau^2/2}\, d\tau = 2(J_2 - J_3),

    :math:`J_p = \int_0^1 \tau^p e^{-a\tau^2/2} d\tau`: with :math:`h = \sqrt{a/2}`,
    :math:`J_0 = \frac{\sqrt\pi}{2h}\operatorname{erf}(h)`, :math:`J_1 = -\operatorname{expm1}(-a/2)/a`,
    :math:`J_2 = (J_0 - e^{-a/2})/a`, :math:`J_3 = \frac{1 - e^{-c}(1 + c)}{2c^2}` (:math:`c = a/2`), used for
    :math:`a \ge 2`; for :math:`a < 2` the everywhere-convergent series

    .. math::

        K_0 = 2\sum_{n\ge0} \frac{(-a/2)^n}{n!}\Big(\frac1{2n+1} - \frac1{2n+2}\Big),\qquad
        K_2 = 2\sum_{n\ge0} \frac{(-a/2)^n}{n!}\Big(\frac1{2n+3} - \frac1{2n+4}\Big)

    (24 terms: the truncation error is below :math:`1/24! \approx 10^{-24}`).
    """
    small = a < 2
    a_s = torch.where(small, torch.full_like(a, 2.0), a)
    h = torch.sqrt(a_s / 2)
    c = a_s / 2
    ea = torch.exp(-c)
    j0 = (_SQRT_PI_2 / h) * torch.erf(h)
    j1 = -torch.expm1(-c) / a_s
    j2 = (j0 - ea) / a_s
    j3 = (-torch.expm1(-c) - c * ea) / (2 * c * c)
    k0, k2 = 2 * (j0 - j1), 2 * (j2 - j3)
    x = -a / 2
    s0 = torch.zeros_like(a)
    s2 = torch.zeros_like(a)
    for n in range(23, -1, -1):
        f = 1.0 / math.factorial(n)
        s0 = s0 * x + f * (1 / (2 * n + 1) - 1 / (2 * n + 2))
        s2 = s2 * x + f * (1 / (2 * n + 3) - 1 / (2 * n + 4))
    return torch.where(small, 2 * s0, k0), torch.where(small, 2 * s2, k2)


# =============================================================================================
# integrated gradients against integrated gradients
# =============================================================================================
def _pair_plan(EE: Tensor, Eo: Tensor, En: Tensor, oo: Tensor, on: Tensor, nn: Tensor) -> tuple[Tensor, ...]:
    r"""Outer integration range and panel counts for :func:`_pair_moments` (no autograd).

    The exponent :math:`Q(s, t) = \tfrac12\|\mathbf E + s\boldsymbol\delta_o - t\boldsymbol\delta_n\|^2` is convex,
    so its partial minimum :math:`m(s) = \min_{t \in [0, 1]} Q(s, t) = Q(s, \mathrm{clip}(t^*(s)))`,
    :math:`t^*(s) = (E_n + s\,o_n)/n_n`, is convex and piecewise quadratic. Its minimum over :math:`[0, 1]` is
    attained at one of seven candidates (the end points, the two kinks where :math:`t^*(s) \in \{0, 1\}`, and the
    stationary points of the three pieces). The outer integrand is at most :math:`\mathrm{poly}\cdot e^{-m(s)}`,
    so :math:`[s_-, s_+] = \{s: m(s) \le m_\min + T\}` (bisection, outer bracket) holds everything but a relative
    :math:`e^{-T}`. The number of panels :math:`P` makes each at most ``_PANEL_WIDTH`` Gaussian widths
    :math:`1/\sqrt{o_o}` wide and lets :math:`m` rise by at most ``_PANEL_RISE`` across each.
    """
    tiny = torch.finfo(EE.dtype).tiny ** 0.5
    nn_s = torch.where(nn > 0, nn, torch.ones_like(nn))
    scalars = (EE, Eo, En, oo, on, nn, nn_s)

    def m_of(s: Tensor, sc: tuple[Tensor, ...] = scalars) -> Tensor:
        ee, eo, en, o2, on_, n2, n2s = (v.view(v.shape + (1,) * (s.dim() - v.dim())) for v in sc)
        t = ((en + s * on_) / n2s).clamp(0, 1)
        return 0.5 * (ee + 2 * s * eo - 2 * t * en + s * s * o2 - 2 * s * t * on_ + t * t * n2)

    def div(p: Tensor, q: Tensor) -> Tensor:
        ok = q.abs() > tiny
        return torch.where(ok, p / torch.where(ok, q, torch.ones_like(q)), torch.zeros_like(p))

    det = oo * nn - on * on
    cand = torch.stack(
        [
            torch.zeros_like(EE),
            torch.ones_like(EE),
            div(-Eo, oo),
            div(on - Eo, oo),
            div(-En, on),
            div(nn - En, on),
            div(on * En - Eo * nn, det),
        ],
        dim=-1,
    )
    cand = torch.nan_to_num(cand, nan=0.0).clamp(0, 1)
    m_min, arg = m_of(cand).min(-1)
    s_min = cand.gather(-1, arg.unsqueeze(-1)).squeeze(-1)
    thr = m_min + _PAIR_TAIL

    def crossing(end: float) -> tuple[Tensor, Tensor]:
        """Where m crosses thr between s_min and ``end``, for the pairs with m(end) > thr (outer bracket)."""
        sel = (m_of(torch.full_like(EE, end)) > thr).nonzero().squeeze(-1)
        inner, outer = s_min[sel], torch.full_like(s_min[sel], end)  # m(inner) ≤ thr < m(outer)
        sc, th = tuple(v[sel] for v in scalars), thr[sel]
        for _ in range(24):
            mid = (inner + outer) / 2
            inside = m_of(mid, sc) <= th
            inner, outer = torch.where(inside, mid, inner), torch.where(inside, outer, mid)
        return sel, outer

    sel, at = crossing(0.0)
    s_lo = torch.zeros_like(EE).index_put((sel,), at)
    sel, at = crossing(1.0)
    s_hi = torch.ones_like(EE).index_put((sel,), at)
    length = (s_hi - s_lo).clamp_min(0)
    rise = torch.maximum(m_of(s_lo), m_of(s_hi)) - m_min
    panels = torch.maximum(oo.sqrt() * length / _PANEL_WIDTH, rise / _PANEL_RISE)
    panels = torch.nan_to_num(panels, nan=1.0).clamp(1, _MAX_PANELS).ceil()
    # round up to powers of two so elements share a handful of node sets
    panels = torch.exp2(torch.log2(panels).ceil()).long()
    t_min = ((En + s_min * on) / nn_s).clamp(0, 1)
    return s_lo, length, panels, s_min, t_min


def _pair_moments(
    P0: Tensor,
    P1: Tensor,
    P2: Tensor,
    nn: Tensor,
    lo0: Tensor,
    lo1: Tensor,
    u_lo: Tensor,
    length: Tensor,
    panels: Tensor,
) -> tuple[Tensor, ...]:
    r"""Double-integral moments of a pair of paths, in the coordinates of :func:`_ig_pair_blocks` (1-D inputs).

    The exponent is :math:`Q = \tfrac12 (\|\mathbf w_\perp(u)\|^2 + n_n v^2)` with
    :math:`\|\mathbf w_\perp(u)\|^2 = P_0 + 2uP_1 + u^2P_2`, over :math:`u \in [u_-, u_- + L]` (``u_lo``,
    ``length``: the part of the outer range where the integrand is not negligible) and, for each :math:`u`,
    :math:`v \in [l(u), l(u) + 1]` with :math:`l(u) = l_0 + l_1 u`. Returns (``M00, M01, M02, M10, M11, R``)

    .. math::

        M_{0a} = \iint u^a e^{-Q}, \; a = 0, 1, 2, \qquad M_{1a} = \iint u^a v\, e^{-Q}, \; a = 0, 1, \qquad
        R = \iint (1 - n_n v^2) e^{-Q} = \int \big[v\, e^{-Q}\big]_{v = l(u)}^{l(u) + 1} du.

    :math:`R` (the along-path part of :math:`\delta_{ij} - w_i w_j`, a total derivative in :math:`v`) is taken from
    its boundary terms rather than as :math:`M_{00} - n_n M_2`, which would cancel when the paths overlap over
    many lengthscales. The inner :math:`v`-integral is closed-form (:func:`_segment_moments` with
    :math:`A = n_n`, :math:`B = 0`, :math:`C = \|\mathbf w_\perp(u)\|^2`, ``lo`` :math:`= l(u)`); the outer
    :math:`u`-integral is a composite ``_PAIR_NODES``-point Gauss–Legendre rule with ``panels`` equal panels
    (:func:`_pair_plan`).
    """
    t, w = gauss_legendre(_PAIR_NODES, P0)
    idx_all, vals_all = [], []
    for p in torch.unique(panels).tolist():
        sel = (panels == p).nonzero().squeeze(-1)
        # node offsets within [0, 1] for p panels, and weights
        nodes = ((torch.arange(p, dtype=P0.dtype, device=P0.device).unsqueeze(-1) + t) / p).reshape(-1)
        weights = (w / p).repeat(p)
        for sl in _chunks(sel.numel(), nodes.numel() * 16):
            ix = sel[sl]
            p0, p1, p2, n2, l0, l1 = (v[ix, None] for v in (P0, P1, P2, nn, lo0, lo1))
            u = u_lo[ix, None] + length[ix, None] * nodes  # (N, P·n)
            wu = length[ix, None] * weights
            cu = p0 + u * (2 * p1 + u * p2)
            lo = l0 + l1 * u
            I0, I1, _ = _segment_moments(n2, torch.zeros_like(u), cu, lo)
            hi = lo + 1
            ends = hi * torch.exp(-0.5 * (cu + n2 * hi * hi)) - lo * torch.exp(-0.5 * (cu + n2 * lo * lo))
            wI0, wI1 = wu * I0, wu * I1
            uI0 = u * wI0
            vals = torch.stack(
                [wI0.sum(-1), uI0.sum(-1), (u * uI0).sum(-1), wI1.sum(-1), (u * wI1).sum(-1), (wu * ends).sum(-1)],
                dim=-1,
            )
            idx_all.append(ix)
            vals_all.append(vals)
    idx = torch.cat(idx_all)
    vals = torch.cat(vals_all)
    out = vals.new_zeros(P0.numel(), 6).index_put((idx,), vals)
    return out.unbind(-1)


def _ig_pair_blocks(d1: Tensor, d2: Tensor, E: Tensor) -> Tensor:
    r"""Per-pair IG–IG covariance blocks of two straight paths, before averaging over baselines.

    For paths :math:`\mathbf a(s) = \mathbf b + s\boldsymbol\Delta`, :math:`\mathbf a'(t) = \mathbf b' +
    t\boldsymbol\Delta'`, in scaled units (:math:`\boldsymbol\delta_1 = \boldsymbol\Delta/\boldsymbol\ell`,
    :math:`\boldsymbol\delta_2 = \boldsymbol\Delta'/\boldsymbol\ell`, :math:`\mathbf E = (\mathbf b -
    \mathbf b')/\boldsymbol\ell`, :math:`\mathbf w = \mathbf E + s\boldsymbol\delta_1 - t\boldsymbol\delta_2`),

    .. math::

        \mathrm{Cov}(\mathrm{IG}_i, \mathrm{IG}'_j) = \delta_{1i}\delta_{2j} \iint_{[0,1]^2}
        \big(\delta_{ij} - w_i w_j\big) e^{-\|\mathbf w\|^2/2}\, ds\, dt
        = \delta_{1i}\delta_{2j}\big(\delta_{ij} M_{00} - (\mathbf V^\top \mathbf S \mathbf V)_{ij}\big).

    :math:`\iint \mathbf w\mathbf w^\top e^{-Q}` does not change when :math:`\mathbf w \to -\mathbf w`, so the roles
    of the paths may be swapped: the shorter one, :math:`\boldsymbol\delta_o`, goes outside (variable :math:`s`),
    the other, :math:`\boldsymbol\delta_n`, inside (:math:`t`), and :math:`\mathbf E_o = \pm\mathbf E`. The square
    is then re-centred on the minimiser :math:`(s_c, t_c)` of :math:`Q` (:func:`_pair_plan`),
    :math:`u = s - s_c`, :math:`\mathbf E_c = \mathbf E_o + s_c\boldsymbol\delta_o - t_c\boldsymbol\delta_n`, and
    :math:`\mathbf w` is split into its parts across and along :math:`\boldsymbol\delta_n`:

    .. math::

        \mathbf w = \mathbf E_c + u\boldsymbol\delta_o - (t - t_c)\boldsymbol\delta_n
        = \underbrace{\mathbf E_\perp + u\boldsymbol\delta_{o\perp}}_{\mathbf w_\perp(u)}
        - v\,\boldsymbol\delta_n, \qquad v = t - t_c - \tau(u), \quad
        \tau(u) = \frac{(\mathbf E_c + u\boldsymbol\delta_o)\cdot\boldsymbol\delta_n}{n_n},

    (:math:`\mathbf E_\perp`, :math:`\boldsymbol\delta_{o\perp}` the components orthogonal to
    :math:`\boldsymbol\delta_n`), so :math:`Q = \tfrac12(\|\mathbf w_\perp(u)\|^2 + n_n v^2)` and
    :math:`\mathbf V = [\mathbf E_\perp; \boldsymbol\delta_{o\perp}; \boldsymbol\delta_n]` with
    :math:`\mathbf S = \begin{pmatrix} M_{00} & M_{01} & -M_{10} \\ M_{01} & M_{02} & -M_{11} \\ -M_{10} & -M_{11}
    & M_2 \end{pmatrix}` from :func:`_pair_moments`. In these coordinates every term of
    :math:`\mathbf V^\top\mathbf S\mathbf V` is of the size of the result: where two long paths cross, or run
    side by side, the moments are taken about the place where they meet instead of cancelling large terms. The
    shift of the square is a constant (no autograd), so gradients are unaffected. Finally the along-path part
    is combined before it can cancel: with :math:`\mathbf G = \boldsymbol\delta_n\boldsymbol\delta_n^\top/n_n`,
    :math:`\delta_{ij} M_{00} - (\boldsymbol\delta_n\boldsymbol\delta_n^\top)_{ij} M_2 = (\mathbf I - \mathbf G)_{ij}
    M_{00} + G_{ij} R` with the boundary-term moment :math:`R = M_{00} - n_n M_2` of :func:`_pair_moments` (for
    :math:`D = 1`, :math:`\mathbf I - \mathbf G = 0` exactly and the result keeps its relative accuracy even when it
    is a tiny difference, e.g. for two long overlapping paths).

    A path paired with itself (:math:`\mathbf E = 0`, :math:`\boldsymbol\delta_1 = \boldsymbol\delta_2 =
    \boldsymbol\delta`, exactly) uses the closed form of :func:`_self_moments`: :math:`M_{00} = K_0`,
    :math:`\mathbf V^\top\mathbf S\mathbf V = K_2\,\boldsymbol\delta\boldsymbol\delta^\top`, evaluated at
    :math:`a = \boldsymbol\delta_1\cdot\boldsymbol\delta_2` and symmetrised in :math:`\boldsymbol\delta_{1,2}`.
    By the symmetry of the covariance the true partial derivatives in :math:`\boldsymbol\delta_1` and
    :math:`\boldsymbol\delta_2` there are equal (and those in :math:`\mathbf E` vanish), which this form
    reproduces, so gradients are right even when only one side is differentiated.

    :param d1, d2, E: broadcastable ``(..., D)``.
    :return: ``(..., D, D)``.
    """
    shape = torch.broadcast_shapes(d1.shape, d2.shape, E.shape)
    d1, d2, E = (v.expand(shape).reshape(-1, shape[-1]) for v in (d1, d2, E))
    n1, n2, d12 = (d1 * d1).sum(-1), (d2 * d2).sum(-1), (d1 * d2).sum(-1)
    same = (E == 0).all(-1) & (d1 == d2).all(-1)
    zero = torch.zeros_like(n1)
    M00, M01, M02, M10, M11, R = (zero,) * 6
    V = torch.stack([E, d1, d2], dim=-2)  # (N, 3, D); replaced below for the general pairs
    G = None  # δ_n δ_nᵀ / n_n for the general pairs
    gen = (~same).nonzero().squeeze(-1)
    if gen.numel():
        sw = (n1 > n2)[gen].unsqueeze(-1)  # put the shorter path outside
        do = torch.where(sw, d2[gen], d1[gen])
        dn = torch.where(sw, d1[gen], d2[gen])
        Eo = torch.where(sw, -E[gen], E[gen])
        oo, nn, on = (do * do).sum(-1), (dn * dn).sum(-1), d12[gen]
        with torch.no_grad():
            s_lo, length, panels, s_c, t_c = _pair_plan(
                *(v.detach() for v in ((Eo * Eo).sum(-1), (Eo * do).sum(-1), (Eo * dn).sum(-1), oo, on, nn))
            )
        Ec = Eo + s_c.unsqueeze(-1) * do - t_c.unsqueeze(-1) * dn
        nn_s = torch.where(nn > 0, nn, torch.ones_like(nn))  # nn = 0: both paths are points, dn = 0
        tau0, tau1 = (Ec * dn).sum(-1) / nn_s, on / nn_s
        Ep = Ec - tau0.unsqueeze(-1) * dn
        op = do - tau1.unsqueeze(-1) * dn
        mom = _pair_moments(
            (Ep * Ep).sum(-1),
            (Ep * op).sum(-1),
            (op * op).sum(-1),
            nn,
            -t_c - tau0,
            -tau1,
            s_lo - s_c,
            length,
            panels,
        )
        M00, M01, M02, M10, M11, R = (zero.index_put((gen,), v) for v in mom)
        V = V.index_put((gen,), torch.stack([Ep, op, dn], dim=-2))
        G = E.new_zeros(E.size(0), shape[-1], shape[-1])
        G = G.index_put((gen,), dn.unsqueeze(-1) * (dn / nn_s.unsqueeze(-1)).unsqueeze(-2))
    # the δ_n δ_nᵀ M_2 term is carried by R below, so S_22 = 0
    s_e1, s_e2, s_11, s_12, s_22 = M01, -M10, M02, -M11, zero
    sid = same.nonzero().squeeze(-1)
    if sid.numel():
        # K(δ1·δ2) and P = K2 (δ1δ2ᵀ + δ2δ1ᵀ)/2 in the basis [E; δ1; δ2]: the values at δ1 = δ2, written
        # symmetrically so that the partial derivatives in δ1 and δ2 are the (equal) halves of the diagonal one
        k0, k2 = _self_moments(d12[sid])
        M00 = M00.index_put((sid,), k0)
        s_12 = s_12.index_put((sid,), k2 / 2)
        s_e1, s_e2, s_11, s_22 = (v.index_put((sid,), zero[sid]) for v in (s_e1, s_e2, s_11, s_22))
    S = torch.stack(
        [
            torch.stack([M00, s_e1, s_e2], -1),
            torch.stack([s_e1, s_11, s_12], -1),
            torch.stack([s_e2, s_12, s_22], -1),
        ],
        dim=-2,
    )  # (N, 3, 3)
    P = V.transpose(-1, -2) @ (S @ V)  # (N, D, D)
    eye = torch.eye(shape[-1], dtype=E.dtype, device=E.device)
    # δ_ij M00 − δ_nδ_nᵀ M2 = (I − G) M00 + G R, G = δ_nδ_nᵀ/n_n: I − G is formed first (exactly 0 for D = 1)
    inner = eye * M00[:, None, None] if G is None else (eye - G) * M00[:, None, None] + G * R[:, None, None]
    out = d1.unsqueeze(-1) * d2.unsqueeze(-2) * (inner - P)
    if shape[-1] == 1:
        # D = 1: IG is f(x) − f(b), so the covariance is a sum of four kernel values (the corners of the square);
        # for paths of at least a lengthscale that is accurate to a few ulps of the kernel values even when the
        # result is a tiny difference, which the integral is not
        def k(v: Tensor) -> Tensor:
            return torch.exp(-0.5 * v * v)

        corner = k(E + d1 - d2) - k(E + d1) - k(E - d2) + k(E)
        long = (d1.abs() >= 1) & (d2.abs() >= 1)
        out = torch.where(long.unsqueeze(-1), corner.unsqueeze(-1), out)
    return out.reshape(*shape, shape[-1])
