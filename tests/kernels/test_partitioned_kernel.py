"""PartitionedKernel / PartitionedKernelLinearOperator: the memory-lean kernel equals the dense one.

Every comparison is against the plain GPyTorch kernel on the same data (dense products, autograd
through the dense matrix, GPyTorch's own ExactGP and MLL), with blocks small enough to force several
row blocks per product. The CG comparisons use deterministic probes, so that both operators run the
same iterations and differ only by the round-off of their products.
"""

import unittest
import warnings

import gpytorch
import pytest
import torch
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from linear_operator.test.linear_operator_test_case import LinearOperatorTestCase, RectangularLinearOperatorTestCase

import gpytorch_explain as ge
from gpytorch_explain import GPXModel
from gpytorch_explain.kernels import PartitionedKernel
from gpytorch_explain.operators import PartitionedKernelLinearOperator
from gpytorch_explain.operators.partitioned_kernel_linear_operator import block_rows, max_block_elements

N = 240
BLOCK = N * 37  # 37 rows per block: 7 blocks for N rows (the last one partial)
N_CG = 150  # GPyTorch's CG path (5 blocks of 37 rows)
TOL = {torch.float64: 1e-10, torch.float32: 2e-5}


def _kernel(name: str, dtype, batch: bool = False) -> gpytorch.kernels.Kernel:
    bs = torch.Size([2]) if batch else torch.Size([])
    if name == "scale_rbf_ard":
        k = ScaleKernel(RBFKernel(ard_num_dims=3, batch_shape=bs), batch_shape=bs)
        k.base_kernel.lengthscale = torch.tensor([0.6, 1.1, 2.0])
        k.outputscale = 1.7
    elif name == "matern52":
        k = MaternKernel(nu=2.5, batch_shape=bs)
        k.lengthscale = 0.9
    elif name == "sum":
        k = ScaleKernel(RBFKernel(batch_shape=bs), batch_shape=bs) + ScaleKernel(
            MaternKernel(nu=1.5, ard_num_dims=3, batch_shape=bs), batch_shape=bs
        )
        k.kernels[0].outputscale = 0.8
        k.kernels[1].base_kernel.lengthscale = torch.tensor([0.7, 1.5, 1.0])
    else:
        raise ValueError(name)
    if batch:  # distinct hyperparameters per batch member
        with torch.no_grad():
            for p in k.parameters():
                p.add_(0.2 * torch.arange(2, dtype=p.dtype).view(2, *[1] * (p.dim() - 1)))
    return k.to(dtype)


KERNELS = ["scale_rbf_ard", "matern52", "sum"]
DTYPES = [torch.float64, torch.float32]


def _data(n=N, dtype=torch.float64, seed=0, batch=()):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*batch, n, 3, generator=g, dtype=torch.float64).to(dtype)


def _params(model) -> list:
    """Parameters sorted by name with the wrappers' ``base_kernel.`` removed, so that a model with
    ``PartitionedKernel(k)`` lists them in the order of the model with ``k``."""
    named = sorted((name.replace("base_kernel.", ""), p) for name, p in model.named_parameters())
    return [p for _, p in named]


def _grads(loss, tensors):
    return torch.autograd.grad(loss, tensors, allow_unused=True)


# --------------------------------------------------------------------------- products
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("batch", [False, True])
def test_products_and_gradients_match_dense(name, dtype, batch):
    kernel = _kernel(name, dtype, batch)
    lean = PartitionedKernel(kernel)
    x = _data(dtype=dtype, batch=(2,) if batch else ()).requires_grad_(True)
    x2 = _data(n=N - 50, dtype=dtype, seed=1)
    v = torch.randn(N, 5, dtype=dtype)
    w = torch.randn(N - 50, 3, dtype=dtype)
    tol = TOL[dtype]
    with max_block_elements(BLOCK * (2 if batch else 1)):
        op = lean(x).evaluate_kernel()
        assert isinstance(op, PartitionedKernelLinearOperator)
        assert len(op._row_blocks()) == 7
        dense = kernel(x).to_dense()
        scale = dense.abs().max().item()
        torch.testing.assert_close(op @ v, dense @ v, rtol=0, atol=tol * scale * v.abs().sum(0).max().item())
        torch.testing.assert_close(op.diagonal(), dense.diagonal(dim1=-2, dim2=-1), rtol=0, atol=tol * scale)
        torch.testing.assert_close(op.to_dense(), dense, rtol=0, atol=tol * scale)
        rows, cols = torch.tensor([0, 5, 100, 239]), torch.tensor([3, 5, 7, 200])
        torch.testing.assert_close(op[..., rows, cols], dense[..., rows, cols], rtol=0, atol=tol * scale)
        # rectangular (train/test) blocks, transposed products
        cross = lean(x2, x).evaluate_kernel()
        dense_cross = kernel(x2, x).to_dense()
        torch.testing.assert_close(cross @ v, dense_cross @ v, rtol=0, atol=tol * scale * v.abs().sum(0).max().item())
        w_tol = tol * scale * w.abs().sum(0).max().item()
        torch.testing.assert_close(cross.mT @ w, dense_cross.mT @ w, rtol=0, atol=w_tol)
        # backward through the blocked bilinear derivative: all hyperparameters and the inputs
        params = [x, *kernel.parameters()]
        g_lean = _grads((op @ v).pow(2).sum() + (cross.mT @ w).sin().sum(), params)
        g_dense = _grads((dense @ v).pow(2).sum() + (dense_cross.mT @ w).sin().sum(), params)
    for a, b in zip(g_lean, g_dense, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=50 * tol * b.abs().max().item())


def test_block_setting_and_errors():
    assert block_rows(1000) == max_block_elements.value() // 1000
    with max_block_elements(10):
        assert block_rows(1000) == 1
    with pytest.raises(ValueError, match="max_block_elements"):
        max_block_elements(0).__enter__()
    with pytest.raises(TypeError, match="gpytorch Kernel"):
        PartitionedKernel(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="same number of columns"):
        PartitionedKernelLinearOperator(torch.randn(3, 2), torch.randn(3, 4), covar_func=lambda a, b: a @ b.mT)


# --------------------------------------------------------------------------- exact GP
class _GP(gpytorch.models.ExactGP):
    def __init__(self, x, y, kernel):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _pair(name, dtype, n=N):
    x = _data(n=n, dtype=dtype)
    y = torch.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.1 * torch.randn(n, dtype=dtype)
    models = []
    for lean in (False, True):
        kernel = _kernel(name, dtype)
        model = _GP(x, y, PartitionedKernel(kernel) if lean else kernel).to(dtype)
        model.likelihood.noise = 0.3  # CG converges in tens of iterations, below its 1e-6 plateau
        models.append(model)
    return x, y, models


def _cg_settings(dtype):
    # stop before linear_cg's plateau near a relative residual of 1e-5, so both operators run the same iterations
    tol = 1e-6 if dtype == torch.float64 else 1e-3
    return (
        gpytorch.settings.max_cholesky_size(0),
        gpytorch.settings.cg_tolerance(tol),
        gpytorch.settings.eval_cg_tolerance(tol),
        gpytorch.settings.max_cg_iterations(100),
        gpytorch.settings.deterministic_probes(True),
        gpytorch.settings.num_trace_samples(8),
        max_block_elements(BLOCK),
    )


def _mll_and_grads(model, x, y, cg, dtype):
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    params = _params(model)
    settings = _cg_settings(dtype) if cg else (max_block_elements(BLOCK),)
    with _nested(settings):
        torch.manual_seed(3)
        value = mll(model(x), y)
        grads = _grads(value, params)
    return value.detach(), grads


def _tol(dtype, cg, chol64, cg64, chol32, cg32):
    """Relative tolerances: round-off on the Cholesky path; on the CG path (tolerance 1e-6 / 1e-3) the two
    operators run the same iterations, and the round-off differences of their products grow through them."""
    if dtype == torch.float64:
        return cg64 if cg else chol64
    return cg32 if cg else chol32


class _nested:
    def __init__(self, contexts):
        self.contexts = contexts

    def __enter__(self):
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")  # CG's plateau (NumericalWarning), deterministic_probes' deprecation
        for c in self.contexts:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.contexts):
            c.__exit__(*exc)
        self._warnings.__exit__(*exc)


MLL_CASES = [(name, dtype, False) for name in KERNELS for dtype in DTYPES] + [
    ("scale_rbf_ard", torch.float64, True),
    ("sum", torch.float64, True),
    ("scale_rbf_ard", torch.float32, True),
]


@pytest.mark.parametrize("name,dtype,cg", MLL_CASES)
def test_exact_gp_mll_and_gradients(name, dtype, cg):
    x, y, (plain, lean) = _pair(name, dtype, n=N_CG if cg else N)
    v_plain, g_plain = _mll_and_grads(plain, x, y, cg, dtype)
    v_lean, g_lean = _mll_and_grads(lean, x, y, cg, dtype)
    tol = _tol(dtype, cg, chol64=1e-8, cg64=1e-6, chol32=2e-5, cg32=1e-3)
    torch.testing.assert_close(v_lean, v_plain, rtol=tol, atol=tol)
    assert len(g_plain) == len(g_lean) >= 3
    for a, b in zip(g_lean, g_plain, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * max(1.0, b.abs().max().item()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cg", [False, True])
def test_exact_gp_predictions(dtype, cg):
    x, y, (plain, lean) = _pair("scale_rbf_ard", dtype, n=N_CG if cg else N)
    xs = _data(n=30, dtype=dtype, seed=5)
    out = []
    for model in (plain, lean):
        model.eval()
        settings = _cg_settings(dtype) if cg else (max_block_elements(BLOCK),)
        with torch.no_grad(), _nested(settings):
            pred = model(xs)
            out.append((pred.mean, pred.variance))
    # on the CG path the two runs may stop an iteration apart at the 1e-6 tolerance
    tol = _tol(dtype, cg, chol64=1e-8, cg64=1e-4, chol32=1e-4, cg32=5e-3)
    torch.testing.assert_close(out[1][0], out[0][0], rtol=0, atol=tol)
    torch.testing.assert_close(out[1][1], out[0][1], rtol=0, atol=tol)


# --------------------------------------------------------------------------- GPX
GPX_N, GPX_N_CG = 200, 60
GPX_BLOCK = 37 * 200  # 37 rows per block of a 200-column kernel


def _gpx_pair(dtype, n):
    x = _data(n=n, dtype=dtype, seed=7)
    y = torch.sin(x[:, 0]) * x[:, 1] + x[:, 2] + 0.05 * torch.randn(n, dtype=dtype)
    models = []
    for lean in (False, True):
        kernel = ScaleKernel(RBFKernel(ard_num_dims=3)).to(dtype)
        kernel.base_kernel.lengthscale = torch.tensor([0.8, 1.2, 1.5])
        model = GPXModel(x, y, base_kernel=PartitionedKernel(kernel) if lean else kernel)
        model.likelihood.noise = 0.3  # well conditioned, so that CG converges (see _tol)
        model.weight_noise = 0.1
        models.append(model)
    return x, y, models


def _gpx_iterative(dtype):
    tol = 1e-6 if dtype == torch.float64 else 1e-3  # the training CG (GPX's derived solves have their own)
    return (
        ge.settings.max_cholesky_size(0),
        gpytorch.settings.max_cholesky_size(0),
        gpytorch.settings.cg_tolerance(tol),
        gpytorch.settings.max_cg_iterations(100),
        gpytorch.settings.deterministic_probes(True),
        gpytorch.settings.num_trace_samples(8),
        max_block_elements(18 * GPX_N_CG),  # 4 blocks of at most 18 rows
    )


@pytest.mark.parametrize("dtype,cg", [(torch.float64, False), (torch.float32, False), (torch.float64, True)])
def test_gpx_likelihood_gradients_and_weights(dtype, cg):
    x, y, (plain, lean) = _gpx_pair(dtype, n=GPX_N_CG if cg else GPX_N)
    xs = _data(n=3, dtype=dtype, seed=8)
    results = []
    for model in (plain, lean):
        settings = _gpx_iterative(dtype) if cg else (max_block_elements(GPX_BLOCK),)
        params = _params(model)
        with _nested(settings):
            model.train()
            mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
            torch.manual_seed(3)
            value = mll(model(x), y)
            grads = _grads(value, params)
            model.eval()
            with torch.no_grad(), gpytorch.settings.max_cg_iterations(1000):  # GPyTorch's default, for GPX's solves
                w = model.predict_weights(xs)
                results.append((value.detach(), grads, w.mean, w.variance))
    (v0, g0, m0, s0), (v1, g1, m1, s1) = results
    tol = _tol(dtype, cg, chol64=1e-8, cg64=1e-6, chol32=5e-5, cg32=2e-3)
    torch.testing.assert_close(v1, v0, rtol=tol, atol=tol)
    assert len(g0) == len(g1) >= 4
    for a, b in zip(g1, g0, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * max(1.0, b.abs().max().item()))
    wtol = _tol(dtype, cg, chol64=1e-7, cg64=1e-5, chol32=1e-4, cg32=2e-2)
    torch.testing.assert_close(m1, m0, rtol=0, atol=wtol * m0.abs().max().item())
    torch.testing.assert_close(s1, s0, rtol=0, atol=wtol * s0.abs().max().item())


# --------------------------------------------------------------------------- attribution GP
def test_posterior_gradient_matches_plain_kernel():
    dtype = torch.float64
    x, y, (plain, lean) = _pair("scale_rbf_ard", dtype)
    xs = _data(n=5, dtype=dtype, seed=9)
    out = []
    for model in (plain, lean):
        model.eval()
        with torch.no_grad(), max_block_elements(BLOCK):
            g = ge.PosteriorGradient(model)(xs)
            out.append((g.mean, g.variance))
    torch.testing.assert_close(out[1][0], out[0][0], rtol=0, atol=1e-8)
    torch.testing.assert_close(out[1][1], out[0][1], rtol=0, atol=1e-8)


# --------------------------------------------------------------------------- linear_operator battery
def _battery_op(batch=(), rows=5, cols=None, seed=0, lengthscale=1.0):
    g = torch.Generator().manual_seed(seed)
    kernel = ScaleKernel(RBFKernel(ard_num_dims=2))
    kernel.outputscale = 1.3
    kernel.base_kernel.lengthscale = lengthscale
    x1 = torch.randn(*batch, rows, 2, generator=g).requires_grad_(True)
    x2 = x1 if cols is None else torch.randn(*batch, cols, 2, generator=g).requires_grad_(True)
    return PartitionedKernel(kernel)(x1, x2).evaluate_kernel()


class TestPartitionedKernelLinearOperator(LinearOperatorTestCase, unittest.TestCase):
    seed = 0
    should_test_sample = True

    def setUp(self):
        super().setUp()
        self._block = max_block_elements(10)  # 2 rows per block on a 5 x 5 matrix
        self._block.__enter__()

    def tearDown(self):
        self._block.__exit__()
        super().tearDown()

    def create_linear_op(self):
        from linear_operator.operators import DiagLinearOperator

        op = _battery_op()
        # Diagonal 1.0: the battery's stochastic Lanczos log-determinant (256 probes, rank-2 preconditioner) misses
        # the exact value of this 5 x 5 matrix by up to 35% with a 0.1 diagonal, for a dense operator just the same,
        # and by at most 2.4% over 10 seeds with 1.0.
        return op + DiagLinearOperator(torch.full((5,), 1.0))  # well conditioned, still lazy

    def evaluate_linear_op(self, linear_op):
        return linear_op.to_dense()


class TestPartitionedKernelLinearOperatorPlain(LinearOperatorTestCase, unittest.TestCase):
    seed = 1

    def setUp(self):
        super().setUp()
        self._block = max_block_elements(10)
        self._block.__enter__()

    def tearDown(self):
        self._block.__exit__()
        super().tearDown()

    def create_linear_op(self):
        return _battery_op(seed=1, lengthscale=0.4)  # well conditioned for the battery's CG tolerances

    def evaluate_linear_op(self, linear_op):
        return linear_op.covar_func(linear_op.x1, linear_op.x2, **linear_op.tensor_params)


class TestPartitionedKernelLinearOperatorRectangular(RectangularLinearOperatorTestCase, unittest.TestCase):
    seed = 3

    def setUp(self):
        super().setUp()
        self._block = max_block_elements(10)
        self._block.__enter__()

    def tearDown(self):
        self._block.__exit__()
        super().tearDown()

    def create_linear_op(self):
        return _battery_op(rows=5, cols=4, seed=3)

    def evaluate_linear_op(self, linear_op):
        return linear_op.covar_func(linear_op.x1, linear_op.x2, **linear_op.tensor_params)


# --------------------------------------------------------------------------- KeOps dispatch
@pytest.mark.parametrize("name", ["scale_rbf_ard", "matern52"])
def test_keops_dispatch_plumbing(monkeypatch, name):
    """With pykeops importable, RBF / Matérn bases go to ``gpytorch.kernels.keops``. pykeops is not installed
    here, so this only checks the dispatch (GPyTorch's KeOps kernels then compute densely): same matrix and
    hyperparameter gradients as the plain kernel. The KeOps computation itself is not exercised."""
    from linear_operator.operators import KernelLinearOperator

    import gpytorch_explain.kernels.partitioned_kernel as pk

    monkeypatch.setattr(pk, "keops_available", lambda: True)
    kernel = _kernel(name, torch.float64)
    x = _data(n=40, dtype=torch.float64)
    with gpytorch.settings.lazily_evaluate_kernels(False):
        op = PartitionedKernel(kernel)(x)
    assert type(getattr(op, "base_linear_op", op)) is KernelLinearOperator  # (ScaleKernel: a constant multiple)
    dense = kernel(x).to_dense()
    torch.testing.assert_close(op.to_dense(), dense, rtol=0, atol=1e-12)
    v = torch.randn(40, 2, dtype=torch.float64)
    params = list(kernel.parameters())
    for a, b in zip(_grads((op @ v).pow(2).sum(), params), _grads((dense @ v).pow(2).sum(), params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_attribution_uses_the_base_kernels_closed_forms():
    from gpytorch_explain.attribution.derived import uses_quadrature

    assert not uses_quadrature(PartitionedKernel(ScaleKernel(RBFKernel(ard_num_dims=2))))
    assert uses_quadrature(PartitionedKernel(gpytorch.kernels.MaternKernel(nu=2.5)))
