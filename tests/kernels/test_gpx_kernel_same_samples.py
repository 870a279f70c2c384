"""GPXKernel's same-samples contract (issue 13, issue 16 item 3), in float64 against dense brute force.

``kernel(X)``, ``kernel(X, X)``, ``kernel(X, X.clone())`` and ``kernel(X, diag=True)`` are the joint covariance
:math:`(\\mathbf K + \\sigma_w^2\\mathbf I)\\odot\\mathbf Z\\mathbf Z^\\top` (resp. its diagonal); ``kernel(X1, X2)``
for different sets and ``kernel(X, X, same_samples=False)`` are :math:`\\mathbf K_{12}\\odot\\mathbf Z_1\\mathbf
Z_2^\\top`. :math:`\\mathbf K` is written out by hand (RBF formula; Nyström :math:`\\mathbf K_{XU}\\mathbf
K_{UU}^{-1}\\mathbf K_{UX}` for an SGPR base) or, for KISS-GP, GPyTorch's own interpolated operator densified.
"""

import inspect
import re
import warnings

import pytest
import torch
from gpytorch import settings as gsettings
from gpytorch.kernels import (
    AdditiveKernel,
    GridInterpolationKernel,
    InducingPointKernel,
    Kernel,
    RBFKernel,
    ScaleKernel,
)
from gpytorch.likelihoods import GaussianLikelihood

from gpytorch_explain import GPXKernel, settings
from gpytorch_explain.kernels import gpx_kernel as gpx_kernel_module
from tests.helpers import generator

DT = torch.float64
TOL = {"rtol": 1e-9, "atol": 1e-10}
D, d = 2, 3
OUTPUTSCALE, LENGTHSCALE, WEIGHT_NOISE = 1.6, 0.9, 0.25


def _rbf(x1, x2):
    """The base ScaleKernel(RBF) written out: s exp(-|x - x'|² / (2 l²))."""
    return OUTPUTSCALE * torch.exp(-0.5 * torch.cdist(x1, x2).pow(2) / LENGTHSCALE**2)


def _scaled_rbf():
    base = ScaleKernel(RBFKernel()).to(DT)
    base.outputscale = torch.tensor(OUTPUTSCALE, dtype=DT)  # (a Python float would pass through float32)
    base.base_kernel.lengthscale = torch.tensor(LENGTHSCALE, dtype=DT)
    return base


def _make(base_kind: str, z_mode: str, active: bool = False):
    """(kernel, brute-force K(x1, x2), column selector) for one configuration."""
    inducing = torch.rand(5, D, dtype=DT, generator=generator(7)) * 2 - 1
    if base_kind == "rbf":
        base, dense_k = _scaled_rbf(), _rbf
    elif base_kind == "inducing":
        base = InducingPointKernel(_scaled_rbf(), inducing.clone(), GaussianLikelihood().to(DT)).to(DT)

        def dense_k(x1, x2):
            kuu = _rbf(inducing, inducing)
            return _rbf(x1, inducing) @ torch.linalg.solve(kuu, _rbf(inducing, x2))
    else:  # KISS-GP: GPyTorch's interpolated operator is the definition of K
        base = GridInterpolationKernel(_scaled_rbf(), grid_size=30, num_dims=D, grid_bounds=[(-1.5, 1.5)] * D)
        base = base.to(DT)

        def dense_k(x1, x2):
            with gsettings.lazily_evaluate_kernels(False):
                return base(x1, x2).to_dense()

    extra = 1 if active else 0  # one leading column the kernel must not see
    width = D + (d if z_mode == "z" else 0)
    active_dims = list(range(extra, extra + width)) if active else None
    kernel = GPXKernel(base, x_dims=D, z_dims=d if z_mode == "z" else None, active_dims=active_dims).to(DT)
    kernel.weight_noise = WEIGHT_NOISE
    kernel.eval()
    return kernel, dense_k, extra


def _inputs(n, z_mode, extra, seed):
    x = torch.rand(n, D, dtype=DT, generator=generator(seed)) * 2 - 1
    z = torch.randn(n, d, dtype=DT, generator=generator(seed + 50)) if z_mode == "z" else x
    pad = torch.randn(n, extra, dtype=DT, generator=generator(seed + 99))
    rows = torch.cat([pad, x] if z_mode == "x" else [pad, x, z], dim=-1)
    return rows, x, z


CASES = [
    ("rbf", "z", False),
    ("rbf", "x", False),
    ("rbf", "z", True),
    ("inducing", "z", False),
    ("inducing", "x", True),
    ("kissgp", "z", False),
    ("kissgp", "x", True),
]


# use_grid_features only changes KISS-GP bases: the other bases are run with it on only
GRID_CASES = [(*case, True) for case in CASES] + [(*case, False) for case in CASES if case[0] == "kissgp"]


@pytest.mark.parametrize("base_kind,z_mode,active,grid_features", GRID_CASES)
def test_joint_and_cross_match_brute_force(base_kind, z_mode, active, grid_features):
    kernel, dense_k, extra = _make(base_kind, z_mode, active)
    X, x, z = _inputs(7, z_mode, extra, 0)
    X2, x2, z2 = _inputs(4, z_mode, extra, 1)
    # grid features truncate the grid root (settings.grid_root_tolerance): 1e-6 relative, far below σw²‖z‖² ~ 0.1-1
    tol = TOL if base_kind != "kissgp" else {"rtol": 1e-6, "atol": 1e-6}
    K = dense_k(x, x)
    joint = K * (z @ z.T) + torch.diag(WEIGHT_NOISE * z.pow(2).sum(-1))
    cross = K * (z @ z.T)
    with gsettings.sgpr_diagonal_correction(False), settings.use_grid_features(grid_features):
        for got in (kernel(X), kernel(X, X), kernel(X, X.clone()), kernel(X, X.clone(), same_samples=True)):
            torch.testing.assert_close(got.to_dense(), joint, **tol)
        torch.testing.assert_close(kernel(X, diag=True), joint.diagonal(), **tol)
        torch.testing.assert_close(kernel(X, X.clone(), diag=True), joint.diagonal(), **tol)
        for got in (kernel(X, X, same_samples=False), kernel(X, X.clone(), same_samples=False)):
            torch.testing.assert_close(got.to_dense(), cross, **tol)
        torch.testing.assert_close(kernel(X, X, diag=True, same_samples=False), cross.diagonal(), **tol)
        torch.testing.assert_close(kernel(X, X2).to_dense(), dense_k(x, x2) * (z @ z2.T), **tol)
        torch.testing.assert_close(kernel(X2, X).to_dense(), dense_k(x2, x) * (z2 @ z.T), **tol)
        # the evaluated joint operator, sliced by sample index: test/train-like blocks have no σw²
        op = kernel(X).evaluate_kernel()
        torch.testing.assert_close(op[4:, :4].to_dense(), cross[4:, :4], **tol)
        torch.testing.assert_close(op[4:, 4:].to_dense(), joint[4:, 4:], **tol)


@pytest.mark.parametrize("base_kind,z_mode,active", CASES)
def test_rows_of_one_tensor_at_different_positions_are_different_samples(base_kind, z_mode, active):
    """``same_samples=None`` refined: two views of one tensor whose rows (or batch entries) sit at different positions
    are different samples even when equal, as ``ExactGP``'s test/train slice ``(full[n:], full[:n])`` of its joint
    train+test covariance; the same rows twice, copies, column blocks and expanded (stride-0) copies keep value
    equality. With the kernel's own ``active_dims``, ``Kernel.__call__`` hands ``forward`` ``index_select`` copies:
    direct calls on views are then joint, while slices of the lazy ``kernel(buf)`` (selected once) still are not."""
    n = 6
    kernel, dense_k, extra = _make(base_kind, z_mode, active)
    X, x, z = _inputs(n, z_mode, extra, 5)
    tol = TOL if base_kind != "kissgp" else {"rtol": 1e-6, "atol": 1e-6}
    cross = dense_k(x, x) * (z @ z.T)
    joint = cross + torch.diag(WEIGHT_NOISE * z.pow(2).sum(-1))
    buf = torch.cat([X, X])  # the training rows, then equal "test" rows
    with gsettings.sgpr_diagonal_correction(False):
        lazy = kernel(buf)
        torch.testing.assert_close(lazy[n:, :n].to_dense(), cross, **tol)
        torch.testing.assert_close(lazy[:n, n:].to_dense(), cross, **tol)
        torch.testing.assert_close(lazy[n:, n:].to_dense(), joint, **tol)
        torch.testing.assert_close(lazy[:n, :n].to_dense(), joint, **tol)
        for a, b in ((buf[:n], buf[:n]), (buf[n:], buf[n:]), (X, X), (X, X.clone())):
            torch.testing.assert_close(kernel(a, b).to_dense(), joint, **tol)
            torch.testing.assert_close(kernel(a, b, diag=True), joint.diagonal(), **tol)
        expanded = X.unsqueeze(0).expand(2, *X.shape)  # stride 0: one set of rows, seen twice
        torch.testing.assert_close(kernel(expanded[0], expanded[1]).to_dense(), joint, **tol)
        width = X.size(-1)
        columns = torch.cat([X, X], dim=-1)  # offsets one column block apart, not a whole number of rows
        torch.testing.assert_close(kernel(columns[:, :width], columns[:, width:]).to_dense(), joint, **tol)
        stacked = torch.stack([X, X])  # batch entries of one tensor
        rows_apart = ((buf[:n], buf[n:]), (buf[n:], buf[:n]), (stacked[0], stacked[1]))
        for a, b in rows_apart:
            got = kernel(a, b)
            torch.testing.assert_close(got.to_dense(), joint if active else cross, **tol)
            torch.testing.assert_close(kernel(a, b, diag=True), (joint if active else cross).diagonal(), **tol)
        if not active:  # inside a composite, the GPX kernel sees the composite's row views (ExactGP's case)
            lazy_sum = AdditiveKernel(kernel)(buf)
            torch.testing.assert_close(lazy_sum[n:, :n].to_dense(), cross, **tol)
            torch.testing.assert_close(lazy_sum[n:, n:].to_dense(), joint, **tol)


def test_rows_apart_without_storage_fall_back_to_value_equality():
    """Tensors without a storage (functorch's batched tensors under ``vmap``) cannot be told apart by layout: the
    helper says "not rows apart", and value equality decides."""
    seen = []

    def probe(a, b):
        seen.append(gpx_kernel_module._different_rows_of_one_buffer(a, b))
        return a.sum()

    buf = torch.randn(2, 8, 3, dtype=DT, generator=generator(6))
    torch.func.vmap(probe)(buf[:, :4], buf[:, 4:])
    assert seen == [False]
    assert gpx_kernel_module._different_rows_of_one_buffer(buf[0, :4], buf[0, 4:])
    assert not gpx_kernel_module._different_rows_of_one_buffer(buf[0, :4], buf[0, :4])
    assert not gpx_kernel_module._different_rows_of_one_buffer(buf[0, :4], buf[0, :4].clone())


def test_sgpr_diagonal_correction_belongs_to_same_samples():
    """In eval mode GPyTorch's SGPR adds (k_ii - q_ii) to the joint diagonal; GPX scales it by ‖z_i‖², and a
    cross-covariance (same_samples=False) carries neither it nor σw²."""
    kernel, dense_k, extra = _make("inducing", "z")
    X, x, z = _inputs(6, "z", extra, 3)
    Q = dense_k(x, x)
    corr = (_rbf(x, x).diagonal() - Q.diagonal()).clamp_min(0)
    joint = Q * (z @ z.T) + torch.diag((WEIGHT_NOISE + corr) * z.pow(2).sum(-1))
    with gsettings.sgpr_diagonal_correction(True):
        torch.testing.assert_close(kernel(X).to_dense(), joint, **TOL)
        torch.testing.assert_close(kernel(X, X, same_samples=False).to_dense(), Q * (z @ z.T), **TOL)


def test_wrappers_pass_same_samples_through():
    """``ScaleKernel`` calls ``GPXKernel.forward`` with its keyword arguments: same_samples reaches it."""
    kernel, _, _ = _make("rbf", "z")
    X, x, z = _inputs(5, "z", 0, 4)
    scaled = ScaleKernel(kernel).to(DT)
    scaled.outputscale = torch.tensor(2.0, dtype=DT)
    cross = 2.0 * _rbf(x, x) * (z @ z.T)
    torch.testing.assert_close(scaled(X, X, same_samples=False).to_dense(), cross, **TOL)
    joint = cross + torch.diag(2.0 * WEIGHT_NOISE * z.pow(2).sum(-1))
    torch.testing.assert_close(scaled(X, X.clone()).to_dense(), joint, **TOL)


def test_no_call_override_and_no_identity_test():
    """Issue 16 item 3: the dispatch lives in ``forward``; no ``__call__`` override, no ``x2 is x1`` test."""
    assert GPXKernel.__call__ is Kernel.__call__
    assert "__call__" not in vars(GPXKernel)
    source = inspect.getsource(gpx_kernel_module)
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())  # comments may mention it
    assert not re.search(r"\bx2\s+is\s+x1\b|\bx1\s+is\s+x2\b|is None or x2 is", code)
    assert "same_samples" in inspect.signature(GPXKernel.forward).parameters


def _warned(fn) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return sum("got two equal inputs as separate copies" in str(w.message) for w in caught)


def test_own_active_dims_and_copied_equal_inputs_warn_once():
    """A GPX kernel with its own ``active_dims`` gets ``index_select`` copies from ``Kernel.__call__``: equal copies
    cannot be told apart (joint or two equal sets), so it warns once; calls that keep one buffer, explicit
    ``same_samples`` and ``diag=True`` do not warn."""
    X = torch.randn(7, 3, dtype=DT, generator=generator(3))
    fresh = lambda: GPXKernel(RBFKernel(), x_dims=2, active_dims=[0, 2]).to(DT)  # noqa: E731
    k = fresh()
    assert _warned(lambda: k(X).to_dense()) == 0
    assert _warned(lambda: k(X, X.clone(), same_samples=True).to_dense()) == 0
    assert _warned(lambda: k(X, X.clone(), same_samples=False).to_dense()) == 0
    assert _warned(lambda: k(X, X.clone(), diag=True)) == 0
    assert _warned(lambda: k(X, X.clone() + 1.0).to_dense()) == 0  # different values: a cross-covariance
    # lazily (the default) a direct call selects the columns once, on the lazy tensor: no copies reach forward
    assert _warned(lambda: k(X, X.clone()).to_dense()) == 0
    with gsettings.lazily_evaluate_kernels(False):
        assert _warned(lambda: k(X, X.clone()).to_dense()) == 1
        assert _warned(lambda: k(X, X.clone()).to_dense()) == 0  # once per kernel
    # the composite case it is there for: the joint block during training already warns
    composite = fresh() + ScaleKernel(RBFKernel(active_dims=[1])).to(DT)
    assert _warned(lambda: composite(X).to_dense()) == 1
    # no own active_dims: rows of one buffer tell the blocks apart, nothing to warn about
    plain = GPXKernel(RBFKernel(), x_dims=3).to(DT) + ScaleKernel(RBFKernel()).to(DT)
    assert _warned(lambda: plain(X).to_dense()) == 0
