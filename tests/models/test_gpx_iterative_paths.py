"""GPX above the dense limit: CG ("solve") weight posteriors and LOVE ("root") under fast_pred_var.

The dense limit is forced to 0 on a small problem so that GPyTorch's iterative machinery is used,
and the results are compared with the exact Cholesky answers of the same model.
"""

import warnings

import gpytorch
import pytest
import torch

import gpytorch_explain as ge
from gpytorch_explain import GPXModel

DTYPE = torch.float64


@pytest.fixture(scope="module")
def setup():
    g = torch.Generator().manual_seed(0)
    n, D = 150, 3
    x = torch.randn(n, D, generator=g, dtype=DTYPE)
    z = torch.randn(n, 2, generator=g, dtype=DTYPE)
    y = torch.sin(x[:, 0]) * z[:, 0] + x[:, 1] * z[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=DTYPE)
    model = GPXModel(x, y, z)
    model.likelihood.noise = 0.05
    model.weight_noise = 0.05
    model.eval()
    xs = torch.randn(7, D, generator=g, dtype=DTYPE)
    zs = torch.randn(7, 2, generator=g, dtype=DTYPE)
    with torch.no_grad():
        w = model.predict_weights(xs)
        exact = {
            "mean": w.mean,
            "cov": w.covariance_matrix,
            "blocks": w.lazy_covariance_matrix.point_blocks(),
            "f_var": model(xs, zs).variance,
        }
    assert w.lazy_covariance_matrix.factor_type == "cholesky"
    return model, xs, zs, exact


def _iterative():
    return ge.settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0)


def test_cg_weight_posterior_matches_cholesky(setup):
    model, xs, zs, exact = setup
    model.prediction_strategy = None
    a, b = _iterative()
    with torch.no_grad(), a, b, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CG may stop at its iteration cap near 1e-6 residual
        w = model.predict_weights(xs)
        lazy = w.lazy_covariance_matrix
        assert lazy.factor_type == "solve"
        scale = exact["cov"].abs().max()
        torch.testing.assert_close(w.mean, exact["mean"], rtol=0, atol=1e-4 * exact["mean"].abs().max())
        torch.testing.assert_close(w.covariance_matrix, exact["cov"], rtol=0, atol=3e-5 * scale)
        torch.testing.assert_close(lazy.point_blocks(), exact["blocks"], rtol=0, atol=3e-5 * scale)
        rhs = torch.randn(lazy.shape[-1], 2, dtype=DTYPE)
        torch.testing.assert_close(lazy @ rhs, exact["cov"] @ rhs, rtol=0, atol=1e-4 * scale * rhs.abs().max())
    model.prediction_strategy = None


def test_cg_mean_cache_is_refined_with_autograd_on_too(setup):
    """The mean cache is detached, so it is solved without a graph and refined in rounds even when autograd is on
    (the usual call): before, one CG run left a relative residual of ~1e-5 there."""
    model, xs, _, _ = setup
    with torch.no_grad():
        C = model.likelihood(model.forward(model.train_inputs[0])).covariance_matrix
    y = model.train_targets
    residuals = []
    for grad in (True, False):
        model.prediction_strategy = None
        a, b = _iterative()
        with a, b, ge.settings.dense_memory_budget(0), torch.set_grad_enabled(grad), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.predict_weights(xs)
            assert model.prediction_strategy.uses_cholesky is False
            alpha = model.prediction_strategy.mean_cache
        residuals.append(float((C @ alpha - y).norm() / y.norm()))
    model.prediction_strategy = None
    assert residuals[0] <= 1e-6 and residuals[0] == pytest.approx(residuals[1], rel=1e-6), residuals


def test_love_root_error_shrinks_with_rank(setup):
    model, xs, zs, exact = setup
    sd_exact = exact["blocks"].diagonal(dim1=-2, dim2=-1).sqrt()
    errors = {}
    a, b = _iterative()
    with torch.no_grad(), a, b, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rank in (10, 150):
            model.prediction_strategy = None
            with gpytorch.settings.fast_pred_var(), gpytorch.settings.max_root_decomposition_size(rank):
                w = model.predict_weights(xs)
                assert w.lazy_covariance_matrix.factor_type == "root"
                assert w.lazy_covariance_matrix.factor.shape[-1] <= rank
                sd = w.variance.clamp_min(0).sqrt()
                errors[rank] = ((sd - sd_exact).abs() / sd_exact).max().item()
                # the latent variance uses the same root: Var f* = z*ᵀ Cov[w*] z* still holds
                blocks = w.lazy_covariance_matrix.point_blocks()
                f_var = model(xs, zs).variance
                torch.testing.assert_close(torch.einsum("pi,pij,pj->p", zs, blocks, zs), f_var, rtol=1e-8, atol=1e-10)
    model.prediction_strategy = None
    assert errors[150] < 1e-5, errors  # full-rank Lanczos reproduces the exact answer
    assert errors[10] > 10 * errors[150], errors  # a low rank visibly does not


def test_fast_pred_var_below_dense_limit_is_exact(setup):
    model, xs, zs, exact = setup
    model.prediction_strategy = None
    with torch.no_grad(), gpytorch.settings.fast_pred_var(), gpytorch.settings.max_root_decomposition_size(5):
        w = model.predict_weights(xs)
        assert w.lazy_covariance_matrix.factor_type == "cholesky"
        torch.testing.assert_close(w.lazy_covariance_matrix.point_blocks(), exact["blocks"], rtol=1e-10, atol=0)
        torch.testing.assert_close(model(xs, zs).variance, exact["f_var"], rtol=1e-10, atol=0)
    model.prediction_strategy = None


def test_cg_failure_raises_a_clear_error(setup, monkeypatch):
    """A CG solve stopped far from convergence raises ConvergenceError instead of returning wrong weights."""
    model, xs, zs, exact = setup
    monkeypatch.setattr(ge.settings, "cg_iterations", lambda size: 25)
    model.prediction_strategy = None
    a, b = _iterative()
    with torch.no_grad(), a, b, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gpytorch.settings.max_preconditioner_size(0), pytest.raises(ge.ConvergenceError, match="did not converge"):
            model.predict_weights(xs)
    model.prediction_strategy = None


def test_solve_checked_passes_accurate_solves_and_names_nan():
    from linear_operator.operators import DenseLinearOperator

    from gpytorch_explain.utils import solve_checked

    a = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=DTYPE)
    rhs = torch.tensor([[1.0], [2.0]], dtype=DTYPE)
    torch.testing.assert_close(solve_checked(DenseLinearOperator(a), rhs), torch.linalg.solve(a, rhs))

    class Broken(DenseLinearOperator):
        def solve(self, right_tensor, left_tensor=None):
            return torch.full_like(right_tensor, float("nan"))

    with pytest.raises(ge.ConvergenceError, match="NaN"):
        solve_checked(Broken(a), rhs)
    with ge.settings.max_cg_residual(-1.0), pytest.raises(ge.ConvergenceError, match="relative residual"):
        solve_checked(DenseLinearOperator(a), rhs)


def test_solve_checked_runs_cg_in_rounds_and_stops_at_a_stall():
    """A derived solve with a large CG budget runs in rounds of CG_ROUND_ITERATIONS on the residual. It reaches the
    dense solution to the residual limit, and stops once rounds stop halving the residual instead of spending the
    whole budget (finite-precision CG stalls above a 1e-14 target); without a stall it stops at the target."""
    from linear_operator.operators import DenseLinearOperator

    from gpytorch_explain.utils import linalg

    gen = torch.Generator().manual_seed(4)
    q, _ = torch.linalg.qr(torch.randn(400, 400, generator=gen, dtype=DTYPE))
    a = (q * torch.logspace(0, 6, 400, dtype=DTYPE)) @ q.T  # condition number 1e6
    rhs = torch.randn(400, 2, generator=gen, dtype=DTYPE)
    exact = torch.linalg.solve(a, rhs)

    class Counting(DenseLinearOperator):
        products = 0

        def _matmul(self, rhs):
            Counting.products += 1
            return super()._matmul(rhs)

    op = Counting(a)
    with (
        torch.no_grad(),
        gpytorch.settings.max_cholesky_size(0),
        gpytorch.settings.max_preconditioner_size(0),
        gpytorch.settings.cg_tolerance(1e-14),
        gpytorch.settings.max_cg_iterations(100_000),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        x = linalg.solve_checked(op, rhs)
    rel = ((a @ x - rhs).norm(dim=0) / rhs.norm(dim=0)).max()
    assert rel < 1e-4
    torch.testing.assert_close(x, exact, rtol=0, atol=1e-3 * exact.abs().max().item())
    assert Counting.products < 20 * linalg.CG_ROUND_ITERATIONS  # far below the 100,000-iteration budget

    Counting.products = 0
    easy = Counting(torch.eye(400, dtype=DTYPE) * 3 + a / a.norm())  # well conditioned: CG reaches 1e-8 at once
    with (
        torch.no_grad(),
        gpytorch.settings.max_cholesky_size(0),
        gpytorch.settings.cg_tolerance(1e-8),
        gpytorch.settings.max_cg_iterations(100_000),
    ):
        y = linalg.solve_checked(easy, rhs)
    assert ((easy.to_dense() @ y - rhs).norm(dim=0) / rhs.norm(dim=0)).max() < 1e-7
    assert Counting.products <= 100  # a few short rounds, each ended by CG at its tolerance


def test_solve_checked_under_gpytorchs_default_cg_tolerance():
    # GPyTorch's default cg_tolerance is 1.0 (for training): the rounds ended after the first one and the residual
    # check raised "did not converge" with the iteration budget unspent
    from linear_operator.operators import DenseLinearOperator

    from gpytorch_explain.utils import solve_checked

    gen = torch.Generator().manual_seed(3)
    a = torch.randn(200, 200, generator=gen, dtype=DTYPE)
    a = a @ a.mT / 200 + 0.05 * torch.eye(200, dtype=DTYPE)
    rhs = torch.randn(200, 2, generator=gen, dtype=DTYPE)
    assert gpytorch.settings.cg_tolerance.value() == 1.0
    with gpytorch.settings.max_cholesky_size(0):  # CG
        res = solve_checked(DenseLinearOperator(a), rhs)
    resid = (a @ res - rhs).norm(dim=0) / rhs.norm(dim=0)
    # the rounds go on to the target or a stall (here ~1e-6, where finite-precision CG stalls), far below the
    # residual of the first round (0.84 before)
    assert resid.max() <= 1e-5
