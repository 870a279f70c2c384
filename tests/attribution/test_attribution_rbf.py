r"""Closed-form RBF covariances of gradients and integrated gradients against independent brute force.

References are computed without the module's closed forms: mpmath quadrature (``mp.dps = 30``) of the segment
integrands, ``scipy.integrate.quad_vec`` / ``dblquad`` of the hand-differentiated RBF integrands, a dense
tensor-product Gauss–Legendre rule for the IG–IG double integrals, autograd and finite differences of a
hand-written kernel for the gradient forms. All in float64. "Relative" errors are measured against
``max(|ref|, floor · max|ref|)`` so that entries that are tiny compared with the largest are held to an absolute
standard.
"""

import math
import time

import mpmath as mp
import numpy as np
import pytest
import torch
from scipy.integrate import dblquad, quad_vec

from gpytorch_explain.attribution._rbf_moments import _segment_moments, _self_moments, _switch_h
from gpytorch_explain.attribution.rbf import (
    rbf_grad_cross,
    rbf_grad_joint,
    rbf_grad_point,
    rbf_ig_cross,
    rbf_ig_joint,
    rbf_ig_point,
)

DT = torch.float64
H0 = _switch_h(DT)  # segment half-width where _segment_moments switches from quadrature to closed form


def _t(a):
    return torch.as_tensor(np.asarray(a), dtype=DT)


def _assert_rel(got, ref, rtol=1e-9, floor=1e-4):
    got = np.asarray(got.detach() if torch.is_tensor(got) else got, dtype=float)
    ref = np.asarray(ref.detach() if torch.is_tensor(ref) else ref, dtype=float)
    assert got.shape == ref.shape
    assert np.isfinite(got).all()
    scale = np.abs(ref).max()
    tol = rtol * np.maximum(np.abs(ref), floor * scale)
    bad = np.abs(got - ref) > tol
    assert not bad.any(), (
        f"max rel err {np.max(np.abs(got - ref) / np.maximum(np.abs(ref), floor * scale)):.2e}, "
        f"worst at {np.unravel_index(np.argmax(np.abs(got - ref) - tol), ref.shape)}"
    )


def _kern(x, y, ell):
    """Hand-written RBF kernel, ``x (..., m, D)``, ``y (..., n, D)``, ``ell`` broadcastable to (..., 1, D)."""
    u = (x.unsqueeze(-2) - y.unsqueeze(-3)) / ell.unsqueeze(-2)
    return torch.exp(-0.5 * (u * u).sum(-1))


def _unit_dirs(rng, m, ell):
    """``m`` random directions of unit length in lengthscale units."""
    u = rng.normal(size=(m, len(ell)))
    return u / np.linalg.norm(u / ell, axis=1, keepdims=True)


# =============================================================================================
# segment moments against mpmath
# =============================================================================================
def _mp_segment(A, B, C):
    A, B, C = mp.mpf(A), mp.mpf(B), mp.mpf(C)

    def q(t):
        return (A * t * t + 2 * B * t + C) / 2

    tm = min(max(-B / A, 0), 1) if A > 0 else (mp.mpf(0) if B >= 0 else mp.mpf(1))
    qm = q(tm)
    w = 1 / (mp.sqrt(A) + abs(A * tm + B) + 1)
    pts = sorted(
        {mp.mpf(0), mp.mpf(1), tm} | {p for k in (1, 4, 16, 64) for p in (tm - k * w, tm + k * w) if 0 < p < 1}
    )
    return [mp.exp(-qm) * mp.quad(lambda t, p=p: t**p * mp.exp(qm - q(t)), pts) for p in range(3)]


@pytest.mark.parametrize(
    "h", [0.0, 1e-8, 1e-4, 0.05, H0 * (1 - 1e-3), H0 * (1 + 1e-3), 0.5, 3.0, 30.0, 70.7], ids=lambda v: f"h={v:.3g}"
)
def test_segment_moments_vs_mpmath(h):
    mp.mp.dps = 30
    A = 2 * h * h
    rows, refs = [], []
    for C in (0.0, 2.0, 30.0, 400.0, 1500.0):
        for frac in (-1.0, -0.6, 0.3, 1.0):
            B = frac * math.sqrt(A * C)
            rows.append((A, B, C))
            refs.append([float(v) for v in _mp_segment(A, B, C)])
    A, B, C = _t(rows).unbind(-1)
    got = torch.stack(_segment_moments(A, B, C), -1).numpy()
    ref = np.array(refs)
    ok = ref > 1e-290  # beyond that: subnormal/underflow, only required to be tiny
    assert np.all(np.abs(got[~ok]) < 1e-280)
    rel = np.abs(got[ok] - ref[ok]) / ref[ok]
    assert rel.max() < 1e-9, rel.max()
    # where the moments are not tiny the accuracy is close to machine precision
    big = ref > 1e-20
    assert (np.abs(got[big] - ref[big]) / ref[big]).max() < 1e-11


def test_segment_moments_continuous_across_switch_and_batched():
    A = _t([2 * (H0 * (1 - 1e-13)) ** 2, 2 * (H0 * (1 + 1e-13)) ** 2])
    for C, frac in ((0.5, 0.2), (20.0, -0.9), (3.0, 1.0)):
        B = frac * torch.sqrt(A * C)
        I = torch.stack(_segment_moments(A, B, _t(C)), -1)
        assert torch.allclose(I[0], I[1], rtol=1e-10, atol=0)
    # broadcasting and shape
    I0, I1, I2 = _segment_moments(_t([[0.0], [1.0]]), _t([0.0, -0.5, 0.1]), _t(1.0))
    assert I0.shape == I1.shape == I2.shape == (2, 3)
    # A = B = 0: exactly e^{-C/2} / (p + 1)
    I = _segment_moments(_t(0.0), _t(0.0), _t(3.0))
    for p, v in enumerate(I):
        assert v.item() == pytest.approx(math.exp(-1.5) / (p + 1), rel=1e-15)


def _mp_segment_shifted(A, B, C, lo):
    """Moments of v over [lo, lo + 1] by substituting t = v − lo into the [0, 1] reference."""
    A, B, C, lo = (mp.mpf(v) for v in (A, B, C, lo))
    J = _mp_segment(A, B + A * lo, C + 2 * B * lo + A * lo * lo)  # moments of t = v − lo
    return [J[0], J[1] + lo * J[0], J[2] + 2 * lo * J[1] + lo * lo * J[0]]


@pytest.mark.parametrize("h", [0.0, 0.05, H0 * (1 - 1e-3), H0 * (1 + 1e-3), 3.0, 70.7], ids=lambda v: f"h={v:.3g}")
def test_segment_moments_shifted_interval(h):
    mp.mp.dps = 30
    A = 2 * h * h
    rows, refs = [], []
    for C, frac, lo in ((0.0, 0.0, -0.5), (2.0, 0.0, -3.0), (30.0, -0.7, 0.4), (5.0, 0.9, -1.0), (0.1, 0.0, 2.0)):
        B = frac * math.sqrt(A * C)
        rows.append((A, B, C, lo))
        refs.append([float(v) for v in _mp_segment_shifted(A, B, C, lo)])
    A, B, C, lo = _t(rows).unbind(-1)
    got = torch.stack(_segment_moments(A, B, C, lo), -1).numpy()
    ref = np.array(refs)
    # first moments about a point inside the interval can be ~0: absolute floor at 1e-12 of I0
    assert np.all(np.abs(got - ref) <= 1e-11 * np.maximum(np.abs(ref), 1e-2 * ref[:, :1]))


@pytest.mark.parametrize("a", [0.0, 1e-12, 1e-4, 0.5, 2 - 1e-9, 2.0, 2 + 1e-9, 10.0, 1e4], ids=str)
def test_self_moments_vs_mpmath(a):
    mp.mp.dps = 30
    aa = mp.mpf(a)
    pts = [0, 1] if a < 1 else [0, *[k / mp.sqrt(aa) for k in (1, 4, 16) if k / mp.sqrt(aa) < 1], 1]
    ref = [2 * mp.quad(lambda t, p=p: (1 - t) * t**p * mp.exp(-aa * t * t / 2), pts) for p in (0, 2)]
    got = _self_moments(_t([a]))
    for g, r in zip(got, ref, strict=True):
        assert abs(g.item() - float(r)) <= 1e-13 * float(r)


# =============================================================================================
# gradients
# =============================================================================================
ELLS = {
    "iso": lambda D: np.full(D, 0.8),
    "ard": lambda D: np.linspace(0.5, 1.7, D),
}


@pytest.mark.parametrize("D", [1, 3])
@pytest.mark.parametrize("kind", ["iso", "ard"])
def test_grad_forms(D, kind):
    rng = np.random.default_rng(D)
    ell = _t(ELLS[kind](D))
    x, X, x2 = _t(rng.normal(size=(4, D))), _t(rng.normal(size=(5, D))), _t(rng.normal(size=(3, D)))
    # cross against autograd of the hand-written kernel and against central differences
    J = torch.autograd.functional.jacobian(lambda z: _kern(z, X, ell), x)  # (m, n, m, D)
    ref = torch.einsum("pjpi->pij", J)
    got = rbf_grad_cross(x, X, ell)
    _assert_rel(got, ref, 1e-12)
    eps = 1e-5
    fd = torch.stack(
        [(_kern(x + eps * e, X, ell) - _kern(x - eps * e, X, ell)) / (2 * eps) for e in torch.eye(D, dtype=DT)], -2
    )
    _assert_rel(got, fd, 1e-7, floor=1e-2)
    # joint: mixed second derivatives
    H = torch.autograd.functional.jacobian(
        lambda a: torch.autograd.functional.jacobian(lambda b: _kern(a, b, ell), x2, create_graph=True), x
    )  # (m1, m2, m2, D, m1, D) indices (p, q, q', j, p', i)
    ref = torch.einsum("pqqjpi->piqj", H)
    got = rbf_grad_joint(x, x2, ell)
    _assert_rel(got, ref, 1e-12)
    fd2 = torch.stack(
        [
            (rbf_grad_cross(x2, x + eps * e, ell) - rbf_grad_cross(x2, x - eps * e, ell)) / (2 * eps)
            for e in torch.eye(D, dtype=DT)
        ],
        -1,
    )  # d/dx_i of ∂k(x2_q, x_p)/∂x2_j: (q, j, p, i)
    _assert_rel(got, fd2.permute(2, 3, 0, 1), 1e-7, floor=1e-2)
    # point = the diagonal blocks of the joint
    pt = rbf_grad_point(x, ell)
    full = rbf_grad_joint(x, x, ell)
    idx = torch.arange(4)
    assert torch.allclose(pt, full[idx, :, idx, :], rtol=1e-15, atol=0)


def test_grad_forms_batched_lengthscales():
    rng = np.random.default_rng(7)
    D = 3
    ell = _t(rng.uniform(0.5, 2, size=(2, 1, D)))
    x, X = _t(rng.normal(size=(4, D))), _t(rng.normal(size=(5, D)))
    c, j, p = rbf_grad_cross(x, X, ell), rbf_grad_joint(x, X, ell), rbf_grad_point(x, ell)
    assert c.shape == (2, 4, D, 5) and j.shape == (2, 4, D, 5, D) and p.shape == (2, 4, D, D)
    for i in range(2):
        assert torch.allclose(c[i], rbf_grad_cross(x, X, ell[i, 0]), rtol=1e-15)
        assert torch.allclose(j[i], rbf_grad_joint(x, X, ell[i, 0]), rtol=1e-15)
        assert torch.allclose(p[i], rbf_grad_point(x, ell[i, 0]), rtol=1e-15)
    # isotropic (*batch, 1, 1) as gpytorch stores it
    iso = _t([[[0.7]], [[1.3]]])
    assert torch.allclose(rbf_grad_cross(x, X, iso)[1], rbf_grad_cross(x, X, _t([1.3] * D)), rtol=1e-15)


# =============================================================================================
# IG against points: scipy quad_vec of the hand-written integrand
# =============================================================================================
def _ref_ig_cross(x, B, X, ell):
    """mean_r Δ_i ∫ ∂k/∂u_i(b_r + tΔ, X_j) dt by adaptive Gauss–Kronrod, break points at the closest approaches."""
    x, B, X, ell = (np.asarray(v, dtype=float) for v in (x, B, X, ell))
    m, k, n, D = len(x), len(B), len(X), x.shape[-1]

    def integrand(t):
        out = np.zeros((m, D, n))
        for r in range(k):
            d = x - B[r]
            diff = (B[r] + t * d)[:, None, :] - X[None]  # (m, n, D)
            kv = np.exp(-0.5 * ((diff / ell) ** 2).sum(-1))
            out += d[:, :, None] * (-(diff / ell**2) * kv[..., None]).transpose(0, 2, 1)
        return out / k

    pts = set()
    for r in range(k):
        d, bz = (x - B[r]) / ell, (B[r] - X) / ell
        A = (d * d).sum(-1)
        ts = -(d @ bz.T) / np.where(A > 0, A, 1)[:, None]
        pts |= {float(t) for t in ts.ravel() if 0 < t < 1}
    res, _ = quad_vec(integrand, 0, 1, epsabs=1e-15, epsrel=1e-13, norm="max", points=sorted(pts) or None)
    return res


CROSS_REGIMES = {  # ‖Δ/ℓ‖ of the path of the first baseline
    "1e-8": 1e-8,
    "1e-4": 1e-4,
    "0.05": 0.05,
    "below-switch": math.sqrt(2) * H0 * 0.98,
    "above-switch": math.sqrt(2) * H0 * 1.02,
    "5": 5.0,
    "30": 30.0,
    "100": 100.0,
}
CROSS_SETUPS = [(1, 1, "iso"), (3, 1, "ard"), (3, 3, "ard"), (3, 3, "iso")]  # (D, k, lengthscales)


def _cross_problem(regime, D, k, kind, seed=0):
    rng = np.random.default_rng(seed)
    ell = ELLS[kind](D)
    B = rng.normal(size=(k, D))
    x = B[0] + CROSS_REGIMES[regime] * _unit_dirs(rng, 3, ell)
    x[2] = B[-1] + 0.5 * (x[2] - B[0])  # one point relative to another baseline
    # training points near the paths (peaks inside (0, 1)), near the baselines, and one far away (C ≈ 1500)
    near_path = B[0] + rng.uniform(0.1, 0.9, (3, 1)) * (x[:3] - B[0]) + 0.7 * rng.normal(size=(3, D)) * ell
    X = np.concatenate([near_path, B + 0.3 * rng.normal(size=(k, D)), B[:1] + 38.7 * ell / math.sqrt(D)])
    return x, B, X, ell


@pytest.mark.parametrize("setup", CROSS_SETUPS, ids=lambda s: f"D{s[0]}-k{s[1]}-{s[2]}")
@pytest.mark.parametrize("regime", list(CROSS_REGIMES))
def test_ig_cross_vs_quadrature(regime, setup):
    x, B, X, ell = _cross_problem(regime, *setup)
    got = rbf_ig_cross(_t(x), _t(B), _t(X), _t(ell))
    assert got.shape == (len(x), len(ell), len(X))
    _assert_rel(got, _ref_ig_cross(x, B, X, ell), 1e-9)
    # completeness: Σ_i IG_i = f(x) − mean_r f(b_r)
    x_, B_, X_, ell_ = _t(x), _t(B), _t(X), _t(ell)
    comp = _kern(x_, X_, ell_) - _kern(B_, X_, ell_).mean(0)
    assert torch.allclose(got.sum(-2), comp, rtol=0, atol=1e-12)
    # the far training point (C ≈ 1500, out of reach of the shorter paths) contributes next to nothing
    if CROSS_REGIMES[regime] <= 5:
        assert got[..., -1].abs().max() < 1e-200


def test_ig_cross_exact_zero_at_baseline_and_gradients():
    rng = np.random.default_rng(3)
    D = 3
    ell = _t(ELLS["ard"](D))
    b = _t(rng.normal(size=(1, D)))
    X = _t(rng.normal(size=(4, D)))
    x = b.repeat(2, 1).requires_grad_(True)
    out = rbf_ig_cross(x, b, X, ell)
    assert torch.equal(out, torch.zeros_like(out))
    # d IG_i / d x_l at x = b is δ_il ∂_i k(b, X): the IG starts out as Δ ⊙ ∇f(b)
    J = torch.autograd.functional.jacobian(lambda z: rbf_ig_cross(z, b, X, ell), x.detach())  # (m, D, n, m, D)
    gc = rbf_grad_cross(b, X, ell)[0]  # (D, n)
    ref = torch.zeros_like(J)
    for p in range(2):
        for i in range(D):
            ref[p, i, :, p, i] = gc[i]
    assert torch.isfinite(J).all()
    assert torch.allclose(J, ref, rtol=1e-12, atol=1e-15)
    # several baselines, x on one of them: finite values and gradients, also w.r.t. the lengthscales
    B = torch.cat([b, _t(rng.normal(size=(2, D)))])
    ell_ = ell.clone().requires_grad_(True)
    x = b.clone().requires_grad_(True)
    out = rbf_ig_cross(x, B, X, ell_)
    gx, gl = torch.autograd.grad(out.square().sum(), (x, ell_))
    assert torch.isfinite(out).all() and torch.isfinite(gx).all() and torch.isfinite(gl).all()


def test_ig_cross_gradcheck():
    rng = np.random.default_rng(4)
    D = 2
    B = _t(rng.normal(size=(2, D)))
    X = _t(rng.normal(size=(3, D)))
    # one point in each branch of _segment_moments (short and long path)
    x = torch.stack([B[0] + 0.05, B[1] + _t([1.5, -2.0])]).requires_grad_(True)
    ell = _t([0.8, 1.4]).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, l: rbf_ig_cross(a, B, X, l), (x, ell), atol=1e-7)


@pytest.mark.parametrize("ell_shape", ["(D,)", "(1,D)", "(2,1,D)", "(2,1,1)"])
def test_ig_batched_lengthscales(ell_shape):
    rng = np.random.default_rng(5)
    D = 3
    raw = rng.uniform(0.5, 2.0, size=(2, 1, D))
    ell, per = {
        "(D,)": (raw[0, 0], [raw[0, 0]]),
        "(1,D)": (raw[0], [raw[0, 0]]),
        "(2,1,D)": (raw, [raw[0, 0], raw[1, 0]]),
        "(2,1,1)": (raw[..., :1], [np.full(D, raw[0, 0, 0]), np.full(D, raw[1, 0, 0])]),
    }[ell_shape]
    B = _t(rng.normal(size=(2, D)))
    x, X = _t(rng.normal(size=(3, D)) * 2), _t(rng.normal(size=(4, D)))
    ell_t = _t(ell)
    cross, joint, point = rbf_ig_cross(x, B, X, ell_t), rbf_ig_joint(x, B, X, ell_t), rbf_ig_point(x, B, ell_t)
    batched = len(per) == 2
    for i, e in enumerate(per):
        e = _t(e)
        c, j, p = (v[i] if batched else v for v in (cross, joint, point))
        assert torch.allclose(c, rbf_ig_cross(x, B, X, e), rtol=1e-14, atol=1e-16)
        assert torch.allclose(j, rbf_ig_joint(x, B, X, e), rtol=1e-14, atol=1e-16)
        assert torch.allclose(p, rbf_ig_point(x, B, e), rtol=1e-14, atol=1e-16)
    # batch dimensions on the inputs as well
    xb = torch.stack([x, x + 0.1])
    out = rbf_ig_cross(xb, B, X, _t(raw))
    assert out.shape == (2, 3, D, 4)
    assert torch.allclose(out[1], rbf_ig_cross(x + 0.1, B, X, _t(raw[1, 0])), rtol=1e-14, atol=1e-16)


# =============================================================================================
# IG against IG: dense tensor-product Gauss–Legendre brute force
# =============================================================================================
def _brute_ig_pair(x1, b1, x2, b2, ell):
    r"""Δ_i Δ'_j ∬ [δ_ij/ℓ_i² − w_i w_j/(ℓ_i²ℓ_j²)] k dsdt, w = a − a', on a uniform 8-point-per-panel product
    rule with panels a third of the narrowest Gaussian width (no closed forms)."""
    D = len(x1)
    d1, d2 = x1 - b1, x2 - b2
    L = max(np.linalg.norm(d1 / ell), np.linalg.norm(d2 / ell), 3.0)
    panels = int(math.ceil(3 * L))
    t, w = np.polynomial.legendre.leggauss(8)
    edges = np.linspace(0, 1, panels + 1)
    s = (edges[:-1, None] + np.diff(edges)[:, None] * (t + 1) / 2).ravel()
    ws = (np.diff(edges)[:, None] * w / 2).ravel()
    out = np.zeros((D, D))
    for rows in np.array_split(np.arange(len(s)), max(1, len(s) ** 2 * D // 3_000_000)):
        W = (b1 - b2) + s[rows, None, None] * d1 - s[None, :, None] * d2  # a(s) − a'(t), (S, S, D)
        kw = np.exp(-0.5 * ((W / ell) ** 2).sum(-1)) * ws[rows, None] * ws[None, :]
        V = W / ell**2
        out += np.diag(kw.sum() / ell**2) - np.einsum("ab,abi,abj->ij", kw, V, V)
    return d1[:, None] * d2[None, :] * out


def _brute_ig_joint(x1, B1, x2, B2, ell):
    return np.array(
        [[np.mean([_brute_ig_pair(p, r, q, s, ell) for r in B1 for s in B2], axis=0) for q in x2] for p in x1]
    ).transpose(0, 2, 1, 3)  # (m1, D, m2, D)


def _pair_geometries(L, rng, ell):
    D = len(ell)
    b = rng.normal(size=D)
    u, v = _unit_dirs(rng, 2, ell)
    n = np.cross(u / ell, v / ell) * ell
    n = 0.3 * n / np.linalg.norm(n / ell)
    mid = b + 0.4 * L * u
    return {
        "crossing": (b + L * u, b, mid + 0.5 * L * v, mid - 0.5 * L * v),
        "near-miss": (b + L * u, b, mid + 0.5 * L * v + n, mid - 0.5 * L * v + n),
        "collinear": (b + L * u, b, b + 0.8 * L * u, b + 0.3 * L * u),
        "anti-collinear": (b + L * u, b, b + 0.2 * L * u, b + 0.9 * L * u),
        "near-parallel": (b + L * u, b, b + L * u + 0.05 * v, b + 0.01 * v),
        "same-x": (b + L * u, b, b + L * u, b + 0.7 * L * v),
        "short-vs-long": (b + L * u, b, b + 0.5 * L * u + 1e-8 * v, b + 0.5 * L * u),
        "near-variance": (b + L * u, b, b + L * u + 1e-9 * v, b),
        "variance": (b + L * u, b, b + L * u, b),
        "touching-ends": (b + L * u, b, b + L * u + L * v, b + L * u),
        "far-apart": (b + L * u, b, b + L * u + 9 * n / 0.3, b + 9 * n / 0.3),
    }


@pytest.mark.parametrize("L", [0.05, 5.0, 30.0, 100.0])
def test_ig_joint_pair_geometries(L):
    rng = np.random.default_rng(int(L * 7))
    ell = ELLS["ard"](3)
    for name, (x1, b1, x2, b2) in _pair_geometries(L, rng, ell).items():
        got = rbf_ig_joint(_t(x1[None]), _t(b1[None]), _t(x2[None]), _t(ell), _t(b2[None]))[0, :, 0, :]
        ref = _brute_ig_pair(x1, b1, x2, b2, ell)
        try:
            _assert_rel(got, ref, 1e-9, floor=1e-3)
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from None


@pytest.mark.parametrize("D, kind", [(1, "iso"), (3, "ard"), (3, "iso")])
def test_ig_joint_several_baselines(D, kind):
    rng = np.random.default_rng(11 + D)
    ell = ELLS[kind](D)
    B1, B2 = rng.normal(size=(3, D)), rng.normal(size=(2, D))
    x1 = np.concatenate([B1[:1] + 1e-8 * _unit_dirs(rng, 1, ell), rng.normal(size=(2, D)) * 2])
    x2 = np.concatenate([x1[1:2], B2[1:] + 4.0 * _unit_dirs(rng, 1, ell), rng.normal(size=(1, D))])
    got = rbf_ig_joint(_t(x1), _t(B1), _t(x2), _t(ell), _t(B2))
    assert got.shape == (3, D, 3, D)
    _assert_rel(got, _brute_ig_joint(x1, B1, x2, B2, ell), 1e-9, floor=1e-3)
    # baselines2 defaults to baselines
    same = rbf_ig_joint(_t(x1), _t(B1), _t(x2), _t(ell))
    assert torch.allclose(same, rbf_ig_joint(_t(x1), _t(B1), _t(x2), _t(ell), _t(B1)), rtol=0, atol=0)


def test_ig_joint_scipy_dblquad_spot_check():
    rng = np.random.default_rng(2)
    ell = ELLS["ard"](3)
    b1, b2 = rng.normal(size=3), rng.normal(size=3)
    x1, x2 = b1 + 2.0 * _unit_dirs(rng, 1, ell)[0], b2 + 1.5 * _unit_dirs(rng, 1, ell)[0]
    got = rbf_ig_joint(_t(x1[None]), _t(b1[None]), _t(x2[None]), _t(ell), _t(b2[None]))[0, :, 0, :].numpy()
    for i, j in ((0, 0), (1, 2)):

        def f(t, s, i=i, j=j):
            w = (b1 + s * (x1 - b1) - b2 - t * (x2 - b2)) / ell
            return (
                (x1[i] - b1[i])
                * (x2[j] - b2[j])
                * ((i == j) - w[i] * w[j])
                / (ell[i] * ell[j])
                * math.exp(-0.5 * w @ w)
            )

        ref, _ = dblquad(f, 0, 1, 0, 1, epsabs=1e-14, epsrel=1e-12)
        assert abs(got[i, j] - ref) <= 1e-10 * np.abs(got).max()


@pytest.mark.parametrize("k", [1, 3])
def test_ig_point(k):
    rng = np.random.default_rng(20 + k)
    D = 3
    ell = ELLS["ard"](D)
    B = rng.normal(size=(k, D))
    dirs = _unit_dirs(rng, 6, ell)
    scales = np.array([0.0, 1e-8, 0.3, 5.0, 30.0, 100.0])
    x = B[0] + scales[:, None] * dirs
    got = rbf_ig_point(_t(x), _t(B), _t(ell))
    assert got.shape == (6, D, D)
    assert torch.isfinite(got).all()
    if k == 1:
        assert torch.equal(got[0], torch.zeros(D, D, dtype=DT))
    # general pairs of 100-long paths (k = 3) are covered by the pair tests; their brute force is slow
    for p in range(1, 6 if k == 1 else 5):
        ref = np.mean([_brute_ig_pair(x[p], r, x[p], s, ell) for r in B for s in B], axis=0)
        _assert_rel(got[p], ref, 1e-9, floor=1e-3)
    # = the diagonal blocks of the joint
    full = rbf_ig_joint(_t(x), _t(B), _t(x), _t(ell))
    idx = torch.arange(6)
    assert torch.allclose(got, full[idx, :, idx, :], rtol=1e-13, atol=1e-300)
    # variance of Σ_i IG_i = Var(f(x) − f̄(b))
    xs, Bs, ls = _t(x), _t(B), _t(ell)
    var = 1 - 2 * _kern(xs, Bs, ls).mean(-1) + _kern(Bs, Bs, ls).mean()
    assert torch.allclose(got.sum((-1, -2)), var, rtol=0, atol=1e-10)


def test_ig_joint_completeness_and_cross_consistency():
    rng = np.random.default_rng(9)
    D = 3
    ell = _t(ELLS["ard"](D))
    B1, B2 = _t(rng.normal(size=(3, D))), _t(rng.normal(size=(2, D)))
    x1 = torch.cat(
        [B1[:1], B1[1:2] + 1e-8, _t(rng.normal(size=(2, D)) * 3), B1[:1] + 30.0 * _t(_unit_dirs(rng, 1, ell.numpy()))]
    )
    x2 = torch.cat([x1[2:3], _t(rng.normal(size=(2, D))), B2[:1] + 100.0 * _t(_unit_dirs(rng, 1, ell.numpy()))])
    J = rbf_ig_joint(x1, B1, x2, ell, B2)
    # Σ_ij = Cov(f(x) − f̄(b), f(x') − f̄(b'))
    kk = _kern(x1, x2, ell) - _kern(x1, B2, ell).mean(-1, keepdim=True)
    kk = kk - _kern(B1, x2, ell).mean(0) + _kern(B1, B2, ell).mean()
    assert torch.allclose(J.sum((1, 3)), kk, rtol=0, atol=1e-10)
    # Σ_i Cov(IG_i(x1_p), IG_j(x2_q)) = Cov(f(x1_p) − f̄(b), IG_j(x2_q)), from rbf_ig_cross
    via_cross = rbf_ig_cross(x2, B2, x1, ell) - rbf_ig_cross(x2, B2, B1, ell).mean(-1, keepdim=True)  # (q, j, p)
    assert torch.allclose(J.sum(1), via_cross.permute(2, 0, 1), rtol=0, atol=1e-10)
    # and the same on the other side
    via_cross2 = rbf_ig_cross(x1, B1, x2, ell) - rbf_ig_cross(x1, B1, B2, ell).mean(-1, keepdim=True)  # (p, i, q)
    assert torch.allclose(J.sum(3), via_cross2, rtol=0, atol=1e-10)


def test_ig_joint_point_at_baseline_and_gradients():
    rng = np.random.default_rng(12)
    D = 3
    ell = _t(ELLS["ard"](D))
    b = _t(rng.normal(size=(1, D)))
    x2 = _t(rng.normal(size=(2, D)))
    x = b.repeat(2, 1).requires_grad_(True)
    J = rbf_ig_joint(x, b, x2, ell)
    P = rbf_ig_point(x, b, ell)
    assert torch.equal(J, torch.zeros_like(J)) and torch.equal(P, torch.zeros_like(P))
    gJ = torch.autograd.grad(J.sum(), x)[0]
    gP = torch.autograd.functional.jacobian(lambda z: rbf_ig_point(z, b, ell), x.detach())
    assert torch.isfinite(gJ).all() and torch.isfinite(gP).all()
    # first order at x = b: Cov(IG(x), IG(x')) ≈ Δ_i Cov(∂_i f(b), IG_j f(x')) → d/dx_l = δ_il Cov(∂_i f(b), IG_j(x'))
    gJ_full = torch.autograd.functional.jacobian(lambda z: rbf_ig_joint(z, b, x2, ell), x.detach())  # (p,i,q,j,p',l)
    d = 1e-6
    fd = (rbf_ig_joint(b + d * torch.eye(D, dtype=DT), b, x2, ell) - 0) / d  # (l, i, q, j), one-sided from zero
    for i in range(D):
        assert torch.allclose(gJ_full[0, i, :, :, 0, i], fd[i, i], rtol=1e-5, atol=1e-12)
    # several baselines (x on one of them) and the lengthscales
    B = torch.cat([b, _t(rng.normal(size=(2, D)))])
    ell_ = ell.clone().requires_grad_(True)
    xx = torch.cat([b, x2]).requires_grad_(True)
    out = rbf_ig_joint(xx, B, x2, ell_).sum() + rbf_ig_point(xx, B, ell_).sum()
    gx, gl = torch.autograd.grad(out, (xx, ell_))
    assert torch.isfinite(gx).all() and torch.isfinite(gl).all()


def test_ig_joint_gradcheck():
    rng = np.random.default_rng(13)
    D = 2
    B = _t(rng.normal(size=(2, D)))
    x1 = _t(rng.normal(size=(2, D)) * 2).requires_grad_(True)
    x2 = _t(rng.normal(size=(1, D)))
    ell = _t([0.8, 1.4]).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, l: rbf_ig_joint(a, B, x2, l), (x1, ell), atol=1e-7)
    assert torch.autograd.gradcheck(lambda a, l: rbf_ig_point(a, B, l), (x1, ell), atol=1e-7)
    # one side only, exactly on the diagonal (the variance closed form) against differences that leave it
    xf = x1.detach()
    assert torch.autograd.gradcheck(lambda a: rbf_ig_joint(xf, B, a, ell.detach()), (xf.clone().requires_grad_(),))
    assert torch.autograd.gradcheck(lambda a: rbf_ig_joint(a, B[:1], xf, ell.detach()), (xf.clone().requires_grad_(),))


def test_one_dimension_relative_accuracy():
    """For D = 1 the IG is f(x) − f̄(b), so every covariance is a sum of kernel values: checked in mpmath to
    relative accuracy, including long paths whose covariances are tiny differences."""
    mp.mp.dps = 40
    rng = np.random.default_rng(15)
    ell = 0.7

    def k(a, c):
        return mp.exp(-((mp.mpf(a) - mp.mpf(c)) ** 2) / (2 * mp.mpf(ell) ** 2))

    scales = [1e-8, 1e-4, 0.1, 0.69, 0.71, 5.0, 30.0, 100.0]  # |Δ/ℓ| = 1 separates the two forms
    b = rng.normal(size=(2, 1))
    x = b[0] + np.array(scales)[:, None] * rng.choice([-1, 1], size=(len(scales), 1)) * ell
    X = np.concatenate([x[-3:] + 0.3, b + 0.1, b[:1] + 27.1 * ell])
    got = rbf_ig_cross(_t(x), _t(b), _t(X), _t([ell]))[:, 0, :].numpy()
    ref = np.array([[float(sum(k(xp, Xj) - k(br, Xj) for br in b[:, 0]) / 2) for Xj in X[:, 0]] for xp in x[:, 0]])
    ok = np.abs(ref) > 1e-290
    assert np.all(np.abs(got - ref)[ok] <= 1e-10 * np.abs(ref)[ok]) and np.all(np.abs(got[~ok]) < 1e-280)
    # one baseline: with several, averaging over them can itself cancel (exactly so when x is a baseline)
    b1 = b[:1]
    x2 = x[::-1] + 0.2
    got = rbf_ig_joint(_t(x), _t(b1), _t(x2), _t([ell]))[:, 0, :, 0].numpy()
    r = b1[0, 0]
    ref = np.array([[float(k(p, q) - k(p, r) - k(r, q) + k(r, r)) for q in x2[:, 0]] for p in x[:, 0]])
    assert np.all(np.abs(got - ref) <= 1e-10 * np.abs(ref))
    got = rbf_ig_point(_t(x), _t(b1), _t([ell]))[:, 0, 0].numpy()
    ref = np.array([float(2 - 2 * k(p, r)) for p in x[:, 0]])
    assert np.all(np.abs(got - ref) <= 1e-10 * np.abs(ref))


def test_float32_matches_float64():
    rng = np.random.default_rng(14)
    D = 3
    ell = ELLS["ard"](D)
    B = rng.normal(size=(2, D))
    x = np.concatenate([B[:1] + 1e-3, rng.normal(size=(3, D)) * 3])
    X = rng.normal(size=(5, D))
    for fn, args in (
        (rbf_ig_cross, (x, B, X, ell)),
        (rbf_ig_joint, (x, B, x, ell)),
        (rbf_ig_point, (x, B, ell)),
    ):
        hi = fn(*(_t(a) for a in args))
        lo = fn(*(torch.as_tensor(a, dtype=torch.float32) for a in args))
        assert lo.dtype == torch.float32
        assert (lo.double() - hi).abs().max() <= 1e-5 * hi.abs().max()


def test_timing_print():
    """Benchmark-sized calls (no assertion): m = 500 points, n = 1600 training points, D = 11."""
    g = torch.Generator().manual_seed(0)
    m, n, D = 500, 1600, 11
    X = torch.randn(n, D, generator=g, dtype=DT)
    x = torch.randn(m, D, generator=g, dtype=DT)
    ell = torch.rand(1, D, generator=g, dtype=DT) + 0.5
    b = X.mean(0, keepdim=True)
    threads = torch.get_num_threads()
    print(f"\n(torch threads: {threads}; the thread pools of numpy/scipy can oversubscribe a small machine)")
    for name, fn in (
        ("rbf_ig_cross (m=500, n=1600, D=11, k=1)", lambda: rbf_ig_cross(x, b, X, ell)),
        ("rbf_ig_point (m=500, D=11, k=1)", lambda: rbf_ig_point(x, b, ell)),
        ("rbf_ig_point (m=500, D=11, k=3)", lambda: rbf_ig_point(x, X[:3], ell)),
    ):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        print(f"{name}: {best * 1e3:.1f} ms")
