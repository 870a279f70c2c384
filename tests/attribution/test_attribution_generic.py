r"""Generic gradient / integrated-gradient covariances (:mod:`gpytorch_explain.attribution.generic`).

All in float64. Derivatives are checked against central finite differences of the kernel's own ``__call__``
(and analytic limits at coincident points), path integrals against ``scipy.integrate.quad`` / ``dblquad`` of the
same integrands and against completeness, :math:`\sum_i \mathrm{IG}_i f(\mathbf x) = f(\mathbf x) -
\frac1k\sum_r f(\mathbf b_r)`.
"""

import math

import gpytorch
import numpy as np
import pytest
import torch
from gpytorch.kernels import (
    ConstantKernel,
    Kernel,
    LinearKernel,
    MaternKernel,
    PeriodicKernel,
    PiecewisePolynomialKernel,
    RBFKernel,
    RQKernel,
    ScaleKernel,
)
from scipy import integrate

from gpytorch_explain.attribution import IntegratedGradientFunctional
from gpytorch_explain.attribution import generic as G
from gpytorch_explain.attribution._quadrature import gauss_legendre
from tests.helpers import generator as _gen

DTYPE = torch.float64


#: every test here runs with float64 as torch's default dtype (the shared fixture in tests/conftest.py)
pytestmark = pytest.mark.usefixtures("float64")


def _dense(kernel, a, b):
    with torch.no_grad(), gpytorch.settings.lazily_evaluate_kernels(False):
        return kernel(a, b).to_dense()


class SmoothUserKernel(Kernel):
    """A user-defined, non-stationary, smooth kernel (differentiated by autograd)."""

    has_lengthscale = True

    def forward(self, x1, x2, diag=False, **params):
        d = (x1.unsqueeze(-2) - x2.unsqueeze(-3)) / self.lengthscale.unsqueeze(-2)
        return torch.exp(-0.5 * d.square().sum(-1)) * (1.0 + 0.1 * (x1 @ x2.mT))


class LaplaceUserKernel(Kernel):
    """exp(-|x - x'|): not differentiable at x = x' (its autograd second derivative there is NaN)."""

    def forward(self, x1, x2, diag=False, **params):
        return torch.exp(-(x1.unsqueeze(-2) - x2.unsqueeze(-3)).square().sum(-1).sqrt())


def _set(kernel, **values):
    for name, value in values.items():
        setattr(kernel, name, torch.as_tensor(value, dtype=DTYPE))
    return kernel.to(DTYPE)


def _kernels(D=3):
    """Supported kernels with non-trivial hyperparameters (name -> kernel)."""
    ls = torch.linspace(0.7, 1.4, D)
    out = {
        "rbf_ard": _set(RBFKernel(ard_num_dims=D), lengthscale=ls),
        "matern32_iso": _set(MaternKernel(nu=1.5), lengthscale=0.9),
        "matern52_ard_scaled": ScaleKernel(_set(MaternKernel(nu=2.5, ard_num_dims=D), lengthscale=ls)),
        "rq_ard": _set(RQKernel(ard_num_dims=D), lengthscale=ls, alpha=0.7),
        "periodic_ard": _set(PeriodicKernel(ard_num_dims=D), lengthscale=ls + 0.5, period_length=torch.full((D,), 3.0)),
        "linear_ard": _set(LinearKernel(ard_num_dims=D), variance=ls),
        "additive_active_dims": ScaleKernel(_set(MaternKernel(nu=2.5, active_dims=[0]), lengthscale=0.8))
        + _set(RBFKernel(active_dims=[1, 2], ard_num_dims=2), lengthscale=[1.1, 0.6]),
        "product_matern_periodic": _set(MaternKernel(nu=2.5, ard_num_dims=D), lengthscale=ls)
        * _set(PeriodicKernel(), lengthscale=1.3, period_length=2.5),
        "product_matern32_linear_const": _set(MaternKernel(nu=1.5, active_dims=[0, 2]), lengthscale=1.2)
        * (_set(LinearKernel(), variance=0.3) + _set(ConstantKernel(), constant=1.0)),
        "user_smooth": _set(SmoothUserKernel(), lengthscale=0.9),
        "matern52_times_user": _set(MaternKernel(nu=2.5), lengthscale=1.1) * _set(SmoothUserKernel(), lengthscale=1.3),
    }
    batch = ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=D, batch_shape=torch.Size([2])), batch_shape=torch.Size([2]))
    batch.base_kernel.lengthscale = torch.stack([ls, ls.flip(0)]).unsqueeze(-2)
    batch.outputscale = torch.tensor([0.7, 1.6])
    out["batch_matern52"] = batch.to(DTYPE)
    return out


KERNELS = _kernels()


def _fd_grad(kernel, x, X, h=1e-6):
    """Central differences of k(x, X) in x: (*batch, m, D, n)."""
    E = torch.eye(x.size(-1))
    return torch.stack([(_dense(kernel, x + h * e, X) - _dense(kernel, x - h * e, X)) / (2 * h) for e in E], -2)


def _fd_joint(kernel, x1, x2, h=1e-4):
    """Central mixed differences of k(x1, x2): (*batch, m1, D, m2, D)."""
    E = torch.eye(x1.size(-1))
    rows = []
    for ei in E:
        cols = []
        for ej in E:
            val = (
                _dense(kernel, x1 + h * ei, x2 + h * ej)
                - _dense(kernel, x1 + h * ei, x2 - h * ej)
                - _dense(kernel, x1 - h * ei, x2 + h * ej)
                + _dense(kernel, x1 - h * ei, x2 - h * ej)
            ) / (4 * h * h)
            cols.append(val)
        rows.append(torch.stack(cols, -1))  # (.., m1, m2, Dj)
    return torch.stack(rows, -3)  # (.., m1, Di, m2, Dj)


def _completeness_cross(kernel, x, b, X):
    return _dense(kernel, x, X) - torch.stack([_dense(kernel, r.expand_as(x), X) for r in b]).mean(0)


def _completeness_joint(kernel, x1, b1, x2, b2):
    """Cov(f(x) - mean_r f(b_r), f(x') - mean_s f(b'_s))."""
    out = _dense(kernel, x1, x2)
    out = out - torch.stack([_dense(kernel, x1, s.expand_as(x2)) for s in b2]).mean(0)
    out = out - torch.stack([_dense(kernel, r.expand_as(x1), x2) for r in b1]).mean(0)
    return out + torch.stack([_dense(kernel, r.expand_as(x1), s.expand_as(x2)) for r in b1 for s in b2]).mean(0)


# =====================================================================================================================
# (a) derivatives
# =====================================================================================================================
@pytest.mark.parametrize("name", list(KERNELS))
def test_derivatives_match_finite_differences(name):
    kernel = KERNELS[name]
    g = _gen(1)
    x, X = torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g)
    with torch.no_grad():
        (kv,) = G.kernel_derivatives(kernel, x, X, order=0)
        torch.testing.assert_close(kv, _dense(kernel, x, X), rtol=1e-12, atol=1e-12)
        gc = G.grad_cross(kernel, x, X)
        torch.testing.assert_close(gc, _fd_grad(kernel, x, X), rtol=1e-6, atol=1e-7)
        gj = G.grad_joint(kernel, x, X)
        torch.testing.assert_close(gj, _fd_joint(kernel, x, X), rtol=1e-5, atol=1e-6)
        gp = G.grad_point(kernel, x)
        torch.testing.assert_close(gp, torch.diagonal(G.grad_joint(kernel, x, x), dim1=-4, dim2=-2).movedim(-1, -3))
        # pairwise kernel_derivatives agree with the cross forms
        k, g1, g2, h = G.kernel_derivatives(kernel, x, x.flip(-2), pairwise=True)
        kc, g1c, g2c, hc = G.kernel_derivatives(kernel, x, x.flip(-2))
        torch.testing.assert_close(h, torch.diagonal(hc, dim1=-4, dim2=-3).movedim(-1, -3))
        torch.testing.assert_close(g2, torch.diagonal(g2c, dim1=-3, dim2=-2).movedim(-1, -2))


@pytest.mark.parametrize("nu, const", [(1.5, 3.0), (2.5, 5.0 / 3.0)])
def test_matern_second_derivative_at_coincident_points(nu, const):
    """∂_i∂'_j k(x, x) = σ² c δ_ij / ℓ_i² (c = 3 for ν = 3/2, 5/3 for ν = 5/2); autograd through GPyTorch's
    clamped distance would give 0 or NaN here."""
    ls = torch.tensor([0.6, 1.0, 1.7])
    kernel = ScaleKernel(_set(MaternKernel(nu=nu, ard_num_dims=3), lengthscale=ls))
    kernel.outputscale = torch.tensor(1.8)
    x = torch.randn(6, 3, generator=_gen(2))
    with torch.no_grad():
        expected = torch.diag(1.8 * const / ls**2).expand(6, 3, 3)
        torch.testing.assert_close(G.grad_point(kernel, x), expected, rtol=1e-13, atol=1e-13)
        # grad_joint at x1 == x2 (diagonal blocks) and grad_cross (zero gradient at coincidence)
        gj = G.grad_joint(kernel, x, x)
        torch.testing.assert_close(torch.diagonal(gj, dim1=-4, dim2=-2).movedim(-1, -3), expected)
        gc = G.grad_cross(kernel, x, x)
        torch.testing.assert_close(torch.diagonal(gc, dim1=-3, dim2=-1), torch.zeros(3, 6), atol=1e-15, rtol=0)
        # finite differences of the kernel itself at the coincident point (C² only: O(h) for ν = 3/2)
        fd = _fd_joint(kernel, x[:2], x[:2], h=1e-5)
        fd = torch.diagonal(fd, dim1=-4, dim2=-2).movedim(-1, -3)
        torch.testing.assert_close(fd, expected[:2], rtol=1e-3, atol=1e-3)


def test_structured_coincident_limits():
    """Products / sums keep the closed-form limits: Matérn-5/2 × periodic and Matérn-3/2 + RBF at x = x'."""
    ls = torch.tensor([0.8, 1.3])
    m52 = _set(MaternKernel(nu=2.5, ard_num_dims=2), lengthscale=ls)
    per = _set(PeriodicKernel(), lengthscale=0.9, period_length=2.0)
    x = torch.randn(3, 2, generator=_gen(3))
    with torch.no_grad():
        expected = torch.diag(5.0 / 3.0 / ls**2 + 4 * math.pi**2 / (0.9 * 2.0**2))
        torch.testing.assert_close(G.grad_point(m52 * per, x), expected.expand(3, 2, 2))
        m32 = _set(MaternKernel(nu=1.5, active_dims=[1]), lengthscale=0.5)
        rbf = _set(RBFKernel(active_dims=[0]), lengthscale=2.0)
        expected = torch.diag(torch.tensor([1 / 4.0, 3 / 0.25]))
        torch.testing.assert_close(G.grad_point(m32 + rbf, x), expected.expand(3, 2, 2))


def test_batch_kernel_and_batched_inputs():
    kernel = KERNELS["batch_matern52"]
    g = _gen(4)
    x, X = torch.randn(2, 3, 3, generator=g), torch.randn(5, 3, generator=g)
    with torch.no_grad():
        gc = G.grad_cross(kernel, x, X)
        assert gc.shape == (2, 3, 3, 5)
        for i in range(2):
            single = ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=3)).to(DTYPE)
            single.base_kernel.lengthscale = kernel.base_kernel.lengthscale[i]
            single.outputscale = kernel.outputscale[i]
            torch.testing.assert_close(gc[i], G.grad_cross(single, x[i], X))
            torch.testing.assert_close(
                G.ig_point(kernel, x, torch.zeros(3))[i], G.ig_point(single, x[i], torch.zeros(3))
            )


# =====================================================================================================================
# (d) RBF: generic machinery vs hand-written closed forms
# =====================================================================================================================
def test_rbf_matches_handwritten_closed_form():
    ls = torch.tensor([0.7, 1.2, 2.0])
    kernel = ScaleKernel(_set(RBFKernel(ard_num_dims=3), lengthscale=ls))
    kernel.outputscale = torch.tensor(1.3)
    g = _gen(5)
    x, X = torch.randn(4, 3, generator=g), torch.randn(6, 3, generator=g)
    X = torch.cat([X, x[:2]])  # include coincident pairs
    diff = (x.unsqueeze(-2) - X.unsqueeze(-3)) / ls**2  # (m, n, D): (x_i - X_i)/ℓ_i²
    k = 1.3 * torch.exp(-0.5 * ((x.unsqueeze(-2) - X.unsqueeze(-3)) / ls).square().sum(-1))
    grad = -(k.unsqueeze(-1) * diff).transpose(-1, -2)  # (m, D, n)
    hess = k[..., None, None] * (torch.diag(1 / ls**2) - diff.unsqueeze(-1) * diff.unsqueeze(-2))  # (m, n, D, D)
    with torch.no_grad():
        torch.testing.assert_close(G.grad_cross(kernel, x, X), grad, rtol=1e-14, atol=1e-15)
        torch.testing.assert_close(G.grad_joint(kernel, x, X), hess.transpose(-2, -3), rtol=1e-14, atol=1e-15)
        torch.testing.assert_close(G.grad_point(kernel, x), (1.3 / ls**2).diag().expand(4, 3, 3))
        # the autograd path (double-backward over GPyTorch's own RBF) agrees away from coincident points
        Xa = X[:6]
        torch.testing.assert_close(
            G.grad_cross(kernel, x, Xa, method="autograd"), grad[..., :6], rtol=1e-12, atol=1e-14
        )
        hj = G.grad_joint(kernel, x, Xa, method="autograd")
        torch.testing.assert_close(hj, hess[:, :6].transpose(-2, -3), rtol=1e-12, atol=1e-14)


def test_user_kernel_autograd_at_coincident_points():
    """A user kernel goes through autograd; it must be twice differentiable at x = x' (checked against FD)."""
    kernel = KERNELS["user_smooth"]
    x = torch.randn(3, 3, generator=_gen(6))
    with torch.no_grad():
        fd = torch.diagonal(_fd_joint(kernel, x, x), dim1=-4, dim2=-2).movedim(-1, -3)
        torch.testing.assert_close(G.grad_point(kernel, x), fd, rtol=1e-5, atol=1e-6)


# =====================================================================================================================
# (e) kernels without the needed derivatives
# =====================================================================================================================
@pytest.mark.parametrize(
    "kernel",
    [
        MaternKernel(nu=0.5),
        ScaleKernel(MaternKernel(nu=0.5)),
        RBFKernel() * MaternKernel(nu=0.5, active_dims=[1]),
        LaplaceUserKernel(),
        PiecewisePolynomialKernel(q=0),
    ],
    ids=["matern12", "scaled_matern12", "product_with_matern12", "user_laplace", "piecewise_q0"],
)
def test_non_differentiable_kernels_raise(kernel):
    kernel = kernel.to(DTYPE)
    x = torch.randn(3, 2, generator=_gen(7))
    b = torch.zeros(2)
    for call in (
        lambda: G.grad_point(kernel, x),
        lambda: G.grad_joint(kernel, x, x),
        lambda: G.ig_cross(kernel, x, b, x),
        lambda: G.ig_point(kernel, x, b),
    ):
        with pytest.raises(G.KernelNotDifferentiableError, match="differentiable") as info:
            call()
        assert isinstance(info.value, NotImplementedError) and isinstance(info.value, ValueError)
    if isinstance(kernel, MaternKernel):
        with pytest.raises(NotImplementedError, match=r"MaternKernel\(nu=0.5\)"):
            G.grad_cross(kernel, x, x)


def test_input_validation():
    kernel = KERNELS["rbf_ard"]
    x = torch.randn(2, 3)
    with pytest.raises(ValueError, match="columns"):
        G.grad_cross(kernel, x, torch.randn(2, 4))
    with pytest.raises(ValueError, match="baselines"):
        G.ig_cross(kernel, x, torch.zeros(1, 1, 3), x)
    with pytest.raises(ValueError, match="order"):
        G.ig_point(kernel, x, torch.zeros(3), order=0)
    with pytest.raises(ValueError, match="method"):
        G.grad_point(kernel, x, method="fd")
    with pytest.raises(TypeError):
        G.grad_point(torch.nn.Linear(3, 3), x)
    with pytest.raises(ValueError, match="NaN"):
        G.grad_point(kernel, torch.full((1, 3), float("nan")))


# =====================================================================================================================
# (c) completeness
# =====================================================================================================================
@pytest.mark.parametrize("name", list(KERNELS))
def test_completeness(name):
    kernel = KERNELS[name]
    g = _gen(8)
    x, X = torch.randn(3, 3, generator=g), torch.randn(4, 3, generator=g)
    X = torch.cat([X, x[:1], 0.5 * x[1:2]])  # a data point on a path (kink for Matérn terms)
    b = torch.cat([torch.zeros(1, 3), 0.3 * torch.randn(1, 3, generator=g)])
    x2 = torch.randn(2, 3, generator=g)
    loose = name.startswith("periodic") or name == "product_matern_periodic"
    tol = 1e-8 if loose else 1e-10
    with torch.no_grad():
        ic = G.ig_cross(kernel, x, b, X, order=48 if loose else 32)
        torch.testing.assert_close(ic.sum(-2), _completeness_cross(kernel, x, b, X), rtol=0, atol=tol)
        ij = G.ig_joint(kernel, x, b, x2, order=24)
        torch.testing.assert_close(ij.sum((-1, -3)), _completeness_joint(kernel, x, b, x2, b), rtol=0, atol=tol)
        ip = G.ig_point(kernel, x, b, order=24)
        ref = torch.diagonal(_completeness_joint(kernel, x, b, x, b), dim1=-2, dim2=-1)
        torch.testing.assert_close(ip.sum((-1, -2)), ref, rtol=0, atol=tol)
        # ig_point is the diagonal of ig_joint
        ijj = G.ig_joint(kernel, x, b, x, order=16)
        torch.testing.assert_close(
            G.ig_point(kernel, x, b, order=16), torch.diagonal(ijj, dim1=-4, dim2=-2).movedim(-1, -3)
        )


def test_additive_one_dimensional_matern_entrywise():
    r"""For :math:`k = \sum_a k_a(x_a, x'_a)`, :math:`\mathrm{IG}_a f = f_a(x_a) - f_a(b_a)` exactly, so every
    entry has a closed form; the 1-D kinks cross every path (lines through the shared corner)."""
    parts = [
        _set(MaternKernel(nu=nu, active_dims=[a]), lengthscale=ls)
        for a, (nu, ls) in enumerate([(1.5, 0.4), (2.5, 0.7), (1.5, 1.1)])
    ]
    kernel = parts[0] + parts[1] + parts[2]
    g = _gen(9)
    x, x2, X = torch.randn(3, 3, generator=g), torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g)
    b = torch.tensor([[0.1, -0.2, 0.3], [0.5, 0.4, -0.6]])
    with torch.no_grad():
        ic = G.ig_cross(kernel, x, b, X)
        ij = G.ig_joint(kernel, x, b, x2, order=24)
        ip = G.ig_point(kernel, x, b, order=24)
        for a, ka in enumerate(parts):
            torch.testing.assert_close(ic[:, a], _completeness_cross(ka, x, b, X), rtol=0, atol=1e-12)
            torch.testing.assert_close(ij[:, a, :, a], _completeness_joint(ka, x, b, x2, b), rtol=0, atol=1e-11)
            ref = torch.diagonal(_completeness_joint(ka, x, b, x, b), dim1=-2, dim2=-1)
            torch.testing.assert_close(ip[:, a, a], ref, rtol=0, atol=1e-11)
        off = ij.clone()
        for a in range(3):
            off[:, a, :, a] = 0
        assert off.abs().max() == 0


def test_integrated_gradient_object_and_single_baseline():
    kernel = KERNELS["matern52_ard_scaled"]
    x = torch.randn(2, 3, generator=_gen(10))
    b = torch.randn(3, generator=_gen(11))
    with torch.no_grad():
        a = G.ig_point(kernel, x, IntegratedGradientFunctional(b))
        torch.testing.assert_close(a, G.ig_point(kernel, x, b.unsqueeze(0)))


# =====================================================================================================================
# (b) path integrals against scipy
# =====================================================================================================================
def _m52_hess_np(a, a2, ls, sigma2):
    """Numpy Matérn-5/2 ∂_i∂'_j k(a, a2) (checked against grad_joint in the fixture)."""
    z = (a - a2) / ls
    r = math.sqrt(float(z @ z))
    e = math.exp(-math.sqrt(5) * r)
    return (
        sigma2
        * (-(25 / 3) * e * np.outer(z, z) + (5 / 3) * (1 + math.sqrt(5) * r) * e * np.eye(len(a)))
        / np.outer(ls, ls)
    )


def _rbf_hess_np(a, a2, ls, sigma2):
    """Numpy RBF ∂_i∂'_j k(a, a2)."""
    z = (a - a2) / ls
    k = sigma2 * math.exp(-0.5 * float(z @ z))
    return k * (np.eye(len(a)) - np.outer(z, z)) / np.outer(ls, ls)


@pytest.fixture(params=["matern52", "rbf"])
def radial(request):
    """(kernel, numpy ∂∂'k, lengthscales, outputscale) for a scaled ARD Matérn-5/2 / RBF kernel in 2-D."""
    ls = np.array([0.8, 1.3])
    leaf = MaternKernel(nu=2.5, ard_num_dims=2) if request.param == "matern52" else RBFKernel(ard_num_dims=2)
    kernel = ScaleKernel(_set(leaf, lengthscale=torch.tensor(ls)))
    kernel.outputscale = torch.tensor(1.4)
    hess = _m52_hess_np if request.param == "matern52" else _rbf_hess_np
    pts = torch.randn(5, 2, generator=_gen(12))
    with torch.no_grad():
        ref = np.stack([[hess(p.numpy(), q.numpy(), ls, 1.4) for q in pts.flip(0)] for p in pts])
        torch.testing.assert_close(G.grad_joint(kernel, pts, pts.flip(0)), torch.tensor(ref).transpose(-2, -3))
    return kernel, lambda a, a2: hess(a, a2, ls, 1.4)


def test_ig_cross_against_scipy_quad(radial):
    kernel = radial[0]
    x = torch.tensor([[1.5, -0.8]])
    b = torch.tensor([[-0.5, 0.4]])
    # a generic point, a point on the path (kink at t* = 0.3) and the end point itself
    X = torch.tensor([[0.3, 0.9], [-0.5 + 0.3 * 2.0, 0.4 - 0.3 * 1.2], [1.5, -0.8]])
    delta = (x - b)[0]
    with torch.no_grad():
        got = G.ig_cross(kernel, x, b, X, order=32)[0]

        def integrand(t):
            return (G.grad_cross(kernel, b + t * delta, X)[0] * delta[:, None]).numpy()

        ref, _ = integrate.quad_vec(integrand, 0, 0.3, epsabs=1e-14, epsrel=1e-13)
        ref2, _ = integrate.quad_vec(integrand, 0.3, 1, epsabs=1e-14, epsrel=1e-13)
    ref = torch.tensor(ref + ref2)
    torch.testing.assert_close(got, ref, rtol=1e-7, atol=1e-12)
    assert ((got - ref).abs() / ref.abs().clamp_min(1e-3)).max() < 1e-9


def _dbl(f, tri):
    """∫∫ f(t, u) over the unit square, split along u = t (``tri``) or not."""
    kw = dict(epsabs=1e-13, epsrel=1e-12)
    if tri:
        lo, _ = integrate.dblquad(f, 0, 1, 0, lambda t: t, **kw)
        hi, _ = integrate.dblquad(f, 0, 1, lambda t: t, 1, **kw)
        return lo + hi
    return integrate.dblquad(f, 0, 1, 0, 1, **kw)[0]


def test_ig_point_split_diagonal_against_dblquad(radial):
    """Same point, same baseline: for Matérn a kink on the diagonal s = t, handled by Duffy triangles."""
    kernel, hess = radial
    x, b = np.array([1.2, -0.7]), np.array([-0.4, 0.5])
    d = x - b
    ref = np.zeros((2, 2))
    for i in range(2):
        for j in range(i, 2):

            def f(u, t, i=i, j=j):
                return d[i] * d[j] * hess(b + t * d, b + u * d)[i, j]

            ref[i, j] = ref[j, i] = _dbl(f, tri=True)
    ref = torch.tensor(ref)
    scale = float(ref.abs().max())
    xt, bt = torch.tensor(x[None]), torch.tensor(b[None])
    errors, plain = [], []
    with torch.no_grad():
        for order in (8, 16, 32):
            val, est = G.ig_point(kernel, xt, bt, order=order, return_error=True)
            errors.append(float((val[0] - ref).abs().max()) / scale)
            assert float(est.max()) >= 0.1 * errors[-1] * scale  # the estimate is not over-optimistic
            # the same integral by plain tensor GL (no split): only algebraic convergence for Matérn
            t, w = gauss_legendre(order, xt)
            a1, a2 = bt + t.repeat_interleave(order)[:, None] * (xt - bt), bt + t.repeat(order)[:, None] * (xt - bt)
            h = G.kernel_derivatives(kernel, a1, a2, pairwise=True)[3]
            val = torch.einsum("n,nij->ij", (w[:, None] * w).reshape(-1), h) * torch.outer(xt[0] - bt[0], xt[0] - bt[0])
            plain.append(float((val - ref).abs().max()) / scale)
    assert errors[0] < 1e-8 and errors[1] < 1e-12 and errors[2] < 1e-12
    if kernel.base_kernel.__class__ is MaternKernel:
        assert plain[0] > plain[1] > plain[2] > 1e-6  # kink: ~1e-2, 1e-3, 5e-5
    else:
        assert plain[2] < 1e-12  # smooth RBF: no split needed


def test_ig_joint_shared_baseline_corner_against_dblquad(radial):
    """Two points, one baseline: for Matérn a cone singularity at the corner (0, 0)."""
    kernel, hess = radial
    x, x2, b = np.array([1.2, -0.7]), np.array([0.3, 1.1]), np.array([-0.4, 0.5])
    d, d2 = x - b, x2 - b
    ref = np.zeros((2, 2))
    for i in range(2):
        for j in range(2):

            def f(u, t, i=i, j=j):
                return d[i] * d2[j] * hess(b + t * d, b + u * d2)[i, j]

            ref[i, j] = _dbl(f, tri=True)
    with torch.no_grad():
        val = G.ig_joint(kernel, torch.tensor(x[None]), torch.tensor(b[None]), torch.tensor(x2[None]), order=16)[
            0, :, 0, :
        ]
    torch.testing.assert_close(val, torch.tensor(ref), rtol=1e-7, atol=1e-12)


def test_ig_joint_crossing_paths_against_dblquad(radial):
    """Different baselines, paths crossing in their interiors at (t*, u*) = (0.25, 0.5): explicit triangulation."""
    kernel, hess = radial
    b, x = np.array([-0.5, 0.0]), np.array([1.5, 0.0])
    b2, x2 = np.array([0.0, -0.7]), np.array([0.0, 0.7])
    d, d2 = x - b, x2 - b2
    ref = np.zeros((2, 2))
    kw = dict(epsabs=1e-13, epsrel=1e-12)
    for i in range(2):
        for j in range(2):

            def f(u, t, i=i, j=j):
                return d[i] * d2[j] * hess(b + t * d, b2 + u * d2)[i, j]

            ref[i, j] = sum(
                integrate.dblquad(f, t0, t1, u0, u1, **kw)[0]
                for t0, t1 in ((0, 0.25), (0.25, 1))
                for u0, u1 in ((0, 0.5), (0.5, 1))
            )
    with torch.no_grad():
        val = G.ig_joint(
            kernel,
            torch.tensor(x[None]),
            torch.tensor(b[None]),
            torch.tensor(x2[None]),
            torch.tensor(b2[None]),
            order=16,
        )
    torch.testing.assert_close(val[0, :, 0, :], torch.tensor(ref), rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize(
    "geometry",
    ["collinear_overlap", "parallel_same_baseline", "start_on_other_path", "near_miss", "near_parallel"],
)
@pytest.mark.parametrize("nu", [1.5, 2.5])
def test_ig_joint_special_geometries_converge(geometry, nu):
    """Kink lines / points away from corners, and near-misses: completeness to 1e-10 at order 24."""
    kernel = _set(MaternKernel(nu=nu, ard_num_dims=2), lengthscale=[0.5, 0.8])
    b, x, b2, x2 = {
        "collinear_overlap": ([0.0, 0.0], [1.0, 1.0], [0.5, 0.5], [2.0, 2.0]),
        "parallel_same_baseline": ([0.0, 0.0], [1.0, 0.5], [0.0, 0.0], [2.5, 1.25]),
        "start_on_other_path": ([-1.0, 0.0], [1.0, 0.0], [0.2, 0.0], [0.2, 1.0]),
        "near_miss": ([-1.0, 0.0], [1.0, 0.0], [0.1, 1e-3], [0.3, 1.0]),
        "near_parallel": ([0.0, 0.0], [1.0, 0.5], [0.0, 0.0], [2.0, 1.0 + 1e-4]),
    }[geometry]
    x, b, x2, b2 = (torch.tensor([v]) for v in (x, b, x2, b2))
    with torch.no_grad():
        val, est = G.ig_joint(kernel, x, b, x2, b2, order=24, return_error=True)
        ref = _completeness_joint(kernel, x, b, x2, b2)
        assert float((val.sum((-1, -3)) - ref).abs().max()) < 1e-10
        assert float(est.max()) < 1e-5


def test_ig_cross_near_miss_is_graded():
    """A data point 1e-3 lengthscales off the middle of a path (no exact kink, but a near-singular integrand)."""
    for nu in (1.5, 2.5):
        kernel = _set(MaternKernel(nu=nu), lengthscale=1.0)
        x, b = torch.tensor([[3.0, 0.0]]), torch.zeros(1, 2)
        X = torch.tensor([[1.3, 1e-3], [1.3, 0.05], [1.3, 0.0]])
        with torch.no_grad():
            val = G.ig_cross(kernel, x, b, X, order=16)

            def integrand(t, kernel=kernel, x=x, b=b, X=X):
                return (G.grad_cross(kernel, b + t * (x - b), X)[0] * (x - b)[0, :, None]).numpy()

            pts = [1.3 / 3 - 1e-3, 1.3 / 3, 1.3 / 3 + 1e-3]
            ref = sum(
                integrate.quad_vec(integrand, lo, hi, epsabs=1e-15, epsrel=1e-13)[0]
                for lo, hi in zip([0.0, *pts], [*pts, 1.0], strict=True)
            )
        torch.testing.assert_close(val[0], torch.tensor(ref), rtol=1e-9, atol=1e-13)


# =====================================================================================================================
# (f) error estimates
# =====================================================================================================================
def test_error_estimate_is_an_upper_bound_indicator():
    kernel = KERNELS["matern52_ard_scaled"]
    g = _gen(13)
    x, X = 2 * torch.randn(3, 3, generator=g), torch.randn(6, 3, generator=g)
    b = torch.zeros(1, 3)
    with torch.no_grad():
        exact = G.ig_cross(kernel, x, b, X, order=128)
        for order in (2, 4, 8):
            val, est = G.ig_cross(kernel, x, b, X, order=order, return_error=True)
            err = (val - exact).abs()
            assert float(est.max()) > 1e-6  # visibly unconverged
            assert bool((est + 1e-14 >= 0.5 * err).all())
        val, est = G.ig_cross(kernel, x, b, X, order=64, return_error=True)
        assert float(est.max()) < 1e-10 and float((val - exact).abs().max()) < 1e-12
        exact = G.ig_point(kernel, x, b, order=64)
        for order, small in ((3, False), (6, False), (24, True)):
            val, est = G.ig_point(kernel, x, b, order=order, return_error=True)
            err = (val - exact).abs()
            assert bool((est + 1e-14 >= 0.5 * err).all())
            assert (float(est.max()) < 1e-9) == small


def test_block_size_does_not_change_results():
    kernel = KERNELS["product_matern_periodic"]
    g = _gen(14)
    x, X = torch.randn(5, 3, generator=g), torch.randn(7, 3, generator=g)
    b = torch.randn(2, 3, generator=g)
    with torch.no_grad():
        for fn, args in (
            (G.grad_cross, (kernel, x, X)),
            (G.grad_joint, (kernel, x, X)),
            (G.ig_cross, (kernel, x, b, X)),
            (G.ig_point, (kernel, x, b)),
            (G.ig_joint, (kernel, x[:2], b, X[:2])),
        ):
            kw = {"order": 12} if fn in (G.ig_point, G.ig_joint) else {}
            torch.testing.assert_close(fn(*args, block_size=256, **kw), fn(*args, **kw), rtol=1e-13, atol=1e-15)
