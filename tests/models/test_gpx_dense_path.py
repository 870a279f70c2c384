"""GPX's dense prediction path above the count limit (``dense_memory_budget``), its in-place factor, the budget
arithmetic and the memory check, against dense brute force.

"Above the dense limit" is simulated at small n: ``gpytorch_explain.settings.max_cholesky_size`` is lowered by
assigning its global value (not through a ``with`` block, which would make it a hard cap), and GPyTorch's is 0.
"""

import warnings

import gpytorch
import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel
from linear_operator.operators import DenseLinearOperator
from linear_operator.utils.errors import NanError
from linear_operator.utils.warnings import NumericalWarning

import gpytorch_explain.utils.memory as memory_module
from gpytorch_explain import GPXModel
from gpytorch_explain import settings as S
from gpytorch_explain.kernels import PartitionedKernel
from gpytorch_explain.utils import dense_cholesky, dense_fits, dense_path_bytes, uses_dense_path
from gpytorch_explain.utils.dense_path import DENSE_BLOCK_COPIES
from tests.helpers import assert_close_to_scale, generator

N, M, LIMIT = 120, 5, 50
TOL = {torch.float64: {"dense": 1e-9, "cg": 1e-5}, torch.float32: {"dense": 2e-4, "cg": 5e-3}}


@pytest.fixture
def above_limit(monkeypatch):
    """GPX's default limit lowered to 50 (still "at its default": not a ``with`` block) and GPyTorch's to 0."""
    monkeypatch.setattr(S.max_cholesky_size, "_global_value", LIMIT)
    with gpytorch.settings.max_cholesky_size(0):
        yield


def _model(dtype, base=None):
    gen = generator(0)
    x = torch.randn(N, 3, generator=gen, dtype=torch.float64)
    z = torch.randn(N, 2, generator=gen, dtype=torch.float64)
    y = (torch.sin(x[:, :2]) * z).sum(-1) + 0.1 * torch.randn(N, generator=gen, dtype=torch.float64)
    if base is None:
        base = ScaleKernel(RBFKernel(ard_num_dims=3))
    inner = base.base_kernel if isinstance(base, PartitionedKernel) else base
    inner.base_kernel.lengthscale = torch.tensor([[0.8, 1.2, 1.5]])
    inner.outputscale = 1.3
    lik = gpytorch.likelihoods.GaussianLikelihood()
    lik.noise = 0.05
    model = GPXModel(x.to(dtype), y.to(dtype), z.to(dtype), likelihood=lik, base_kernel=base).to(dtype)
    model.weight_noise = 0.04
    xs = torch.randn(M, 3, generator=gen, dtype=torch.float64).to(dtype)
    zs = torch.randn(M, 2, generator=gen, dtype=torch.float64).to(dtype)
    return model.eval(), x, y, z, xs.double(), zs.double()


def _brute_force(model, x, y, z, xs, zs):
    """Dense float64 posterior of the latent f* and of the weights w* at xs (interleaved point * d + feature)."""
    base = model.base_kernel
    inner = base.base_kernel if isinstance(base, PartitionedKernel) else base
    kernel = ScaleKernel(RBFKernel(ard_num_dims=3)).double()
    kernel.base_kernel.lengthscale = inner.base_kernel.lengthscale.detach().double()
    kernel.outputscale = inner.outputscale.detach().double()
    noise, wn = model.likelihood.noise.detach().double(), model.weight_noise.detach().double()
    n, m, d = x.size(0), xs.size(0), z.size(1)
    with torch.no_grad():
        k, k_sx, k_ss = (kernel(a, b).to_dense() for a, b in ((x, x), (xs, x), (xs, xs)))
    eye_n, eye_m = torch.eye(n, dtype=torch.float64), torch.eye(m, dtype=torch.float64)
    c = noise * eye_n + (k + wn * eye_n) * (z @ z.T)
    f_cross = k_sx * (zs @ z.T)  # (m, n)
    f_prior = (k_ss + wn * eye_m) * (zs @ zs.T)
    f_mean = f_cross @ torch.linalg.solve(c, y)
    f_cov = f_prior - f_cross @ torch.linalg.solve(c, f_cross.T)
    b = (k_sx.T.unsqueeze(-1) * z.unsqueeze(1)).reshape(n, m * d)
    w_prior = torch.kron(k_ss + wn * eye_m, torch.eye(d, dtype=torch.float64))
    w_mean = (b.T @ torch.linalg.solve(c, y)).reshape(m, d)
    w_cov = w_prior - b.T @ torch.linalg.solve(c, b)
    return {"f_mean": f_mean, "f_cov": f_cov, "w_mean": w_mean, "w_cov": w_cov}


def _factor_type(model, xs) -> str:
    """The weight covariance's factor type (the covariance itself is lazy: only the mean cache is solved)."""
    model.prediction_strategy = None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)
        res = model.predict_weights(xs[:1]).lazy_covariance_matrix.factor_type
    model.prediction_strategy = None
    return res


def _predict(model, xs, zs, dtype):
    model.prediction_strategy = None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)  # CG may stop at its iteration cap near the tolerance
        f = model(xs.to(dtype), zs.to(dtype))
        w = model.predict_weights(xs.to(dtype))
        out = {
            "f_mean": f.mean,
            "f_cov": f.covariance_matrix,
            "w_mean": w.mean,
            "w_cov": w.covariance_matrix,
            "factor_type": w.lazy_covariance_matrix.factor_type,
            "uses_cholesky": model.prediction_strategy.uses_cholesky,
        }
    model.prediction_strategy = None
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dense_and_cg_paths_match_brute_force_above_the_limit(above_limit, dtype):
    model, x, y, z, xs, zs = _model(dtype)
    ref = _brute_force(model, x, y, z, xs, zs)
    with S.dense_memory_budget(10**12):
        dense = _predict(model, xs, zs, dtype)
    with S.dense_memory_budget(0):
        cg = _predict(model, xs, zs, dtype)
    assert dense["factor_type"] == "cholesky" and dense["uses_cholesky"]
    assert cg["factor_type"] == "solve" and not cg["uses_cholesky"]
    for key in ("f_mean", "f_cov", "w_mean", "w_cov"):
        assert dense[key].dtype == dtype
        assert_close_to_scale(dense[key].double(), ref[key], TOL[dtype]["dense"], f"dense {key}")
        assert_close_to_scale(cg[key].double(), ref[key], TOL[dtype]["cg"], f"CG {key}")
        assert_close_to_scale(cg[key].double(), dense[key].double(), TOL[dtype]["cg"], f"CG vs dense {key}")


def test_lean_base_on_the_dense_path(above_limit):
    """A PartitionedKernel base above the limit: C is built from its row blocks into the one buffer. (Its CG path,
    slow at any n through the per-block kernel calls, is tested against the dense kernel in
    tests/kernels/test_partitioned_kernel.py.)"""
    model, x, y, z, xs, zs = _model(torch.float64, PartitionedKernel(ScaleKernel(RBFKernel(ard_num_dims=3))))
    ref = _brute_force(model, x, y, z, xs, zs)
    with S.dense_memory_budget(10**12):
        dense = _predict(model, xs, zs, torch.float64)
    assert dense["factor_type"] == "cholesky"
    for key in ("f_mean", "f_cov", "w_mean", "w_cov"):
        assert_close_to_scale(dense[key], ref[key], 1e-9, f"dense {key}")


def test_explicit_max_cholesky_size_is_a_hard_cap_and_fast_pred_var_gives_love(above_limit):
    model, *_, xs, zs = _model(torch.float64)
    with S.dense_memory_budget(10**12):
        with S.max_cholesky_size(LIMIT):
            assert _factor_type(model, xs) == "solve"
        with gpytorch.settings.fast_pred_var():
            assert _factor_type(model, xs) == "root"
        assert _factor_type(model, xs) == "cholesky"
    # below the limit the dense factor is used whatever the budget (and under fast_pred_var), as before
    with S.dense_memory_budget(0), S.max_cholesky_size(N), gpytorch.settings.fast_pred_var():
        assert _factor_type(model, xs) == "cholesky"


def test_default_budget_reads_free_memory_once_per_strategy(above_limit, monkeypatch):
    model, *_, xs, zs = _model(torch.float64)
    need = dense_path_bytes(N, torch.float64)
    calls = []

    def free(device=None):
        calls.append(device)
        return int(2.5 * need)  # half of it (the default fraction) fits

    monkeypatch.setattr(memory_module, "available_memory", free)
    import gpytorch_explain.models.gpx_prediction_strategy as strategy_module

    monkeypatch.setattr(strategy_module, "available_memory", free)
    with torch.no_grad():
        model.prediction_strategy = None
        w = model.predict_weights(xs)
        assert w.lazy_covariance_matrix.factor_type == "cholesky"
        strategy = model.prediction_strategy
    reads = len(calls)
    assert reads >= 1
    assert strategy.uses_cholesky
    assert len(calls) == reads  # the strategy's own reading is kept
    monkeypatch.setattr(strategy_module, "available_memory", lambda device=None: int(1.5 * need))
    model.prediction_strategy = None
    assert _factor_type(model, xs) == "solve"


def test_in_place_factor_equals_linear_operator_cholesky():
    """The factor built in one buffer (row blocks, in place) against linear_operator's Cholesky of the dense C, and
    the predictions through it against the autograd path (detach_test_caches off), which uses the latter."""
    model, x, y, z, xs, zs = _model(torch.float64)
    with torch.no_grad():
        model(xs, zs)
        covar = model.prediction_strategy.lik_train_train_covar
        with S.max_block_elements(4 * 7 * N):  # dense_rows: 7 rows per block
            L = dense_cholesky(covar)
        ref = torch.linalg.cholesky(covar.to_dense())
    assert L.shape == (N, N) and L.stride() == (1, N)  # the column-major view of the one buffer
    torch.testing.assert_close(L, ref, rtol=1e-12, atol=1e-13)
    assert torch.equal(L.triu(1), torch.zeros_like(L))
    in_place = _predict(model, xs, zs, torch.float64)
    model.prediction_strategy = None
    with gpytorch.settings.detach_test_caches(False):
        w = model.predict_weights(xs)
        assert w.mean.requires_grad  # the linear_operator path, with its graph
        old = {"w_mean": w.mean.detach(), "w_cov": w.covariance_matrix.detach(), "f_mean": model(xs, zs).mean.detach()}
    model.prediction_strategy = None
    for key, value in old.items():
        torch.testing.assert_close(in_place[key], value, rtol=1e-10, atol=1e-12)


def test_dense_cholesky_jitter_nan_and_batches():
    gen = generator(1)
    a = torch.randn(30, 4, generator=gen, dtype=torch.float64)
    singular = a @ a.T  # rank 4: needs jitter
    with pytest.warns(NumericalWarning, match="added jitter of 1.0e-08"):
        L = dense_cholesky(DenseLinearOperator(singular))
    assert torch.isfinite(L).all()
    jitter = 1e-8 * 10 ** torch.arange(4, dtype=torch.float64)
    # the factor is of C + j I for the first jitter j that succeeds
    errors = [(L @ L.T - singular - j * torch.eye(30, dtype=torch.float64)).abs().max().item() for j in jitter]
    assert min(errors) < 1e-12
    bad = singular.clone()
    bad[3, 5] = float("nan")
    with pytest.raises(NanError, match="non-finite"):
        dense_cholesky(DenseLinearOperator(bad))
    eye = torch.eye(30, dtype=torch.float64)
    spd = torch.stack([singular + eye, singular + 2 * eye])
    Lb = dense_cholesky(spd)
    torch.testing.assert_close(Lb, torch.linalg.cholesky(spd), rtol=1e-12, atol=1e-13)
    assert torch.equal(spd[0], singular + eye)  # a tensor input is not overwritten


def test_budget_arithmetic(monkeypatch):
    n = 1000
    with S.max_block_elements(4 * 10 * n):  # dense_rows: 10 rows per block
        expected = 8 * (n * n + DENSE_BLOCK_COPIES * 10 * n)
        assert dense_path_bytes(n, torch.float64) == expected
        assert dense_path_bytes(n, torch.float32) == expected / 2
        assert dense_path_bytes(n, torch.float64, batch_numel=3) == 3 * 8 * (n * n + DENSE_BLOCK_COPIES * 3 * n)
        with S.dense_memory_budget(expected):
            assert dense_fits(n, torch.float64)
        with S.dense_memory_budget(expected - 1):
            assert not dense_fits(n, torch.float64)
    assert dense_path_bytes(10, torch.float64) == 8 * (100 + DENSE_BLOCK_COPIES * 100)  # a block is at most n x n
    # the default budget: half the free memory, read at call time or given
    assert S.dense_budget_bytes("cpu", free=1000) == 500.0
    monkeypatch.setattr(memory_module, "available_memory", lambda device=None: 4000)
    assert S.dense_budget_bytes("cpu") == 2000.0
    monkeypatch.setattr(memory_module, "available_memory", lambda device=None: None)
    assert S.dense_budget_bytes("cpu") == S.DENSE_FALLBACK_BUDGET == 2**30
    with S.dense_memory_budget(123):
        assert S.dense_budget_bytes("cpu", free=10**12) == 123.0
    for bad in (-1, True, "1GB"):
        with pytest.raises(ValueError, match="dense_memory_budget"), S.dense_memory_budget(bad):
            pass
    assert S.dense_memory_budget.value() is None
    # the path decision
    with gpytorch.settings.max_cholesky_size(0):
        assert uses_dense_path(5000, torch.float64, free=0)  # within the count limit: always
        assert uses_dense_path(20_000, torch.float64, free=10**12)
        assert not uses_dense_path(20_000, torch.float64, free=10**9)  # 3.2 GB do not fit half of 1 GB
        assert not uses_dense_path(20_000, torch.float64, free=10**12, grow=False)
        with S.max_cholesky_size(5000):
            assert not uses_dense_path(20_000, torch.float64, free=10**12)
        with gpytorch.settings.fast_pred_var():
            assert not uses_dense_path(20_000, torch.float64, free=10**12)


def test_max_cholesky_size_tracks_explicit_blocks():
    assert not S.max_cholesky_size.is_set()
    with S.max_cholesky_size(5000):
        assert S.max_cholesky_size.is_set()
        with S.max_cholesky_size(10):
            assert S.max_cholesky_size.value() == 10 and S.max_cholesky_size.is_set()
        assert S.max_cholesky_size.value() == 5000 and S.max_cholesky_size.is_set()
    assert not S.max_cholesky_size.is_set() and S.max_cholesky_size.value() == 5000


def test_memory_check_follows_the_path(above_limit, monkeypatch):
    """Training with a lean base above the limit and its CG predictions need nothing n x n; the dense prediction
    path is checked with its own estimate; a dense base on CG with the kernel matrix's."""
    small = int(dense_path_bytes(N, torch.float64) * 0.9)
    monkeypatch.setattr(memory_module, "available_memory", lambda device=None: small)
    lean, *_ = _model(torch.float64, PartitionedKernel(ScaleKernel(RBFKernel(ard_num_dims=3))))
    dense, *_ = _model(torch.float64)
    lean.check_memory("fit", training=True)  # CG in row blocks: not checked
    with pytest.raises(MemoryError, match="dense/CG path"):
        dense.check_memory("fit", training=True)
    with S.dense_memory_budget(10**12):  # the budget allows the dense path, the machine does not
        with pytest.raises(MemoryError, match="dense Cholesky path"):
            lean.check_memory("predictions")
    monkeypatch.setattr(memory_module, "available_memory", lambda device=None: 3 * N * N * 8)  # < 4 n x n
    with S.dense_memory_budget(0):
        lean.check_memory("predictions")
        with pytest.raises(MemoryError, match="CG path over the dense kernel matrix"):
            dense.check_memory("predictions")
