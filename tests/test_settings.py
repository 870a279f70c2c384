"""gpytorch_explain.settings: defaults, nesting and restoration, per-dtype values, and the one memory setting
(``max_block_elements``) read at call time by every chunked computation."""

from __future__ import annotations

import gpytorch
import pytest
import torch
from gpytorch.kernels import InducingPointKernel, RBFKernel, ScaleKernel

import gpytorch_explain
import gpytorch_explain.attribution._quadrature as quadrature
import gpytorch_explain.attribution.kernel_derivatives as kernel_derivatives
import gpytorch_explain.attribution.sgpr as sgpr_module
import gpytorch_explain.operators.gpx_inducing_linear_operator as inducing_module
import gpytorch_explain.operators.grid_interpolated_linear_operator as grid_module
from gpytorch_explain import settings as S
from gpytorch_explain._compat import _dtype_value_context, _feature_flag, _value_context

DT = torch.float64


# =====================================================================================================================
# Defaults and kinds
# =====================================================================================================================


def test_defaults_and_kinds():
    assert issubclass(S.max_cholesky_size, _value_context) and S.max_cholesky_size.value() == 5000
    assert issubclass(S.max_grid_feature_width, _value_context) and S.max_grid_feature_width.value() == 4096
    assert issubclass(S.scale_warning_range, _value_context) and S.scale_warning_range.value() == (0.1, 10.0)
    assert issubclass(S.max_block_elements, _value_context) and S.max_block_elements.value() == 2**24
    for flag in (S.use_grid_features, S.check_memory):
        assert issubclass(flag, _feature_flag) and flag.on() is True and flag.off() is False
    expected = {
        S.solve_tolerance: (1e-4, 1e-8, 1e-4),
        S.max_cg_residual: (1e-2, 1e-4, 1e-2),
        S.grid_root_tolerance: (1e-6, 1e-12, 1e-6),
    }
    for cls, (f, d, h) in expected.items():
        assert issubclass(cls, _dtype_value_context)
        assert (cls.value(torch.float32), cls.value(torch.float64), cls.value(torch.float16)) == (f, d, h)
        assert cls.value(torch.bfloat16) == h  # bfloat16 reads the half value
        assert cls.value(torch.zeros(1, dtype=torch.float32)) == f  # a tensor gives its dtype


def test_helpers_keep_their_results():
    eval_tol = gpytorch.settings.eval_cg_tolerance.value()
    assert S.derived_solve_tolerance(torch.float64) == min(1e-8, eval_tol)
    assert S.derived_solve_tolerance(torch.float32) == min(1e-4, eval_tol)
    with gpytorch.settings.eval_cg_tolerance(1e-6):
        assert S.derived_solve_tolerance(torch.float32) == 1e-6  # never looser than GPyTorch's
    assert S.cg_residual_limit(torch.float64) == 1e-4 and S.cg_residual_limit(torch.float32) == 1e-2
    assert S.grid_root_threshold(torch.float64) == 1e-12 and S.grid_root_threshold(torch.float32) == 1e-6
    assert S.cg_iterations(10) == max(gpytorch.settings.max_cg_iterations.value(), 20)
    assert S.cg_iterations(10**6) == 2 * 10**6


# =====================================================================================================================
# Contexts: nesting and restoration
# =====================================================================================================================


def test_value_context_nests_and_restores():
    with S.max_cholesky_size(10):
        assert S.max_cholesky_size.value() == 10
        with S.max_cholesky_size(0):
            assert S.max_cholesky_size.value() == 0
        assert S.max_cholesky_size.value() == 10
    assert S.max_cholesky_size.value() == 5000
    with pytest.raises(RuntimeError, match="boom"):
        with S.max_block_elements(7):
            raise RuntimeError("boom")
    assert S.max_block_elements.value() == 2**24  # restored after an exception too


def test_feature_flag_nests_and_restores():
    with S.use_grid_features(False):
        assert not S.use_grid_features.on()
        with S.use_grid_features(True):
            assert S.use_grid_features.on()
        assert not S.use_grid_features.on()
    assert S.use_grid_features.on() and S.use_grid_features.is_default()
    with S.check_memory(False):
        assert S.check_memory.off()
    assert S.check_memory.on()


def test_dtype_setting_single_and_per_dtype_values():
    with S.solve_tolerance(1e-6):  # one value for every dtype (as before the rebuild)
        assert [S.solve_tolerance.value(t) for t in (torch.float32, torch.float64, torch.float16)] == [1e-6] * 3
        assert S.derived_solve_tolerance(torch.float64) == min(1e-6, gpytorch.settings.eval_cg_tolerance.value())
        with S.solve_tolerance(double_value=1e-10):  # only float64 changes
            assert S.solve_tolerance.value(torch.float64) == 1e-10
            assert S.solve_tolerance.value(torch.float32) == 1e-6
            with S.solve_tolerance(None):  # back to the per-dtype defaults inside the block
                assert S.solve_tolerance.value(torch.float64) == 1e-8
                assert S.solve_tolerance.value(torch.float32) == 1e-4
            assert S.solve_tolerance.value(torch.float64) == 1e-10
        assert S.solve_tolerance.value(torch.float64) == 1e-6
    assert S.solve_tolerance.value(torch.float64) == 1e-8 and S.solve_tolerance.value(torch.float32) == 1e-4
    with S.max_cg_residual(0.5), S.grid_root_tolerance(float_value=1e-3):
        assert S.cg_residual_limit(torch.float64) == 0.5 and S.cg_residual_limit(torch.float32) == 0.5
        assert S.grid_root_threshold(torch.float32) == 1e-3 and S.grid_root_threshold(torch.float64) == 1e-12
    assert S.cg_residual_limit(torch.float64) == 1e-4 and S.grid_root_threshold(torch.float32) == 1e-6
    with pytest.raises(ValueError, match="not both"):
        S.solve_tolerance(1e-6, double_value=1e-8)


# =====================================================================================================================
# The one memory setting
# =====================================================================================================================

#: The constants each site had before they were folded into max_block_elements: the default must keep them.
_PREVIOUS_CONSTANTS = {
    "partitioned_kernel": 2**24,
    "attribution_points": 2**24,  # MAX_ROW_ELEMENTS
    "sgpr_train_rows": 2**22,  # TRAIN_CHUNK_ELEMENTS
    "fallback_batched": 2**25,  # _MAX_BATCHED
    "kernel_derivative_block": 2**23,  # DEFAULT_BLOCK
    "rbf_moments": 2**22,  # _CHUNK
    "weight_root_z": 2**25,  # _ROOT_Z_ELEMENTS
    "block_posterior": 2**22,  # _CHUNK_ELEMENTS
    "gpx_inducing": 2**22,  # _CHUNK_ELEMENTS
    "inducing_weight_posterior": 2**23,  # _CHUNK_ELEMENTS
    "dense_block": 2**21,  # DENSE_BLOCK_ELEMENTS
    "feature_block": 2**24,  # FEATURE_BLOCK_ELEMENTS
    "dense_feature": 2**26,  # DENSE_FEATURE_ELEMENTS
    "grid_root_columns": 2**18,  # MAX_ROOT_COLUMNS
    "operator_grid": 2**24,  # MAX_OPERATOR_GRID
    "dense_rows": 2**22,  # new with the site (GPX's dense prediction path)
}


def test_default_budgets_equal_the_previous_constants():
    assert set(S._BUDGET_FACTORS) == set(_PREVIOUS_CONSTANTS)
    for site, value in _PREVIOUS_CONSTANTS.items():
        assert S.block_budget(site) == value, site
        assert f"``{site}``" in S.max_block_elements.__doc__  # each site is in the documented table
    # the names kept for import compatibility still hold the default values
    assert quadrature.MAX_ROW_ELEMENTS == S.block_budget("attribution_points")
    assert sgpr_module.TRAIN_CHUNK_ELEMENTS == S.block_budget("sgpr_train_rows")
    assert kernel_derivatives.DEFAULT_BLOCK == kernel_derivatives.default_block_size()


def test_budgets_scale_with_the_setting_and_validate():
    with S.max_block_elements(1000):
        assert S.block_budget("attribution_points") == 1000
        assert S.block_budget("sgpr_train_rows") == 250
        assert S.block_budget("weight_root_z") == 2000
        assert S.block_budget("grid_root_columns") == 15
    with S.max_block_elements(1):
        assert all(S.block_budget(site) >= 1 for site in _PREVIOUS_CONSTANTS)
    with pytest.raises(ValueError, match="max_block_elements"):
        S.max_block_elements(0).__enter__()
    with pytest.raises(ValueError, match="max_block_elements"):
        S.max_block_elements(2.5).__enter__()
    with pytest.raises(ValueError, match="Unknown block budget site"):
        S.block_budget("nowhere")


def test_chunk_helpers_read_the_setting_at_call_time():
    x, X = torch.zeros(10, 3), torch.zeros(4, 3)  # 12 elements per point
    assert len(quadrature.point_chunks(x, X)) == 1
    assert len(list(inducing_module._row_chunks(100, 8))) == 1
    assert len(grid_module._blocks(100, 8)) == 1
    with S.max_block_elements(48):
        assert len(quadrature.point_chunks(x, X)) == 3  # 4 points per chunk
        assert len(list(inducing_module._row_chunks(100, 8))) == 100  # budget // 4 = 12: 1 row per chunk
        assert len(grid_module._blocks(100, 8)) == 17  # 6 rows per block
        assert len(sgpr_module._train_rows(100, 4)) == 34  # budget // 4 = 12: 3 rows per chunk


def _exact_model():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(25, 2, generator=gen, dtype=DT) * 2 - 1
    y = torch.sin(3 * x[:, 0]) + x[:, 1] ** 2

    class Exact(gpytorch.models.ExactGP):
        def __init__(self):
            lik = gpytorch.likelihoods.GaussianLikelihood()
            super().__init__(x, y, lik)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = ScaleKernel(RBFKernel(ard_num_dims=2))

        def forward(self, inp):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(inp), self.covar_module(inp))

    model = Exact().to(DT)
    model.likelihood.noise = 0.05
    model.covar_module.base_kernel.lengthscale = torch.tensor([0.7, 1.1], dtype=DT)
    return model.eval()


def test_small_budget_chunks_attribution_and_kernel_derivatives_with_equal_results(monkeypatch):
    model = _exact_model()
    xs = torch.rand(6, 2, generator=torch.Generator().manual_seed(1), dtype=DT) * 2 - 1
    calls = []
    derivs = kernel_derivatives._derivs
    monkeypatch.setattr(kernel_derivatives, "_derivs", lambda *a, **k: calls.append(1) or derivs(*a, **k))
    kernel = model.covar_module
    with torch.no_grad():
        ref_post = gpytorch_explain.PosteriorGradient(model)(xs)
        ref_cross = kernel_derivatives.grad_cross(kernel, xs, model.train_inputs[0])
        assert len(calls) == 1 and not ref_post.lazy_covariance_matrix.lazy_rows
        calls.clear()
        with S.max_block_elements(2 * 2 * 25):  # 2 points per attribution chunk; 25 per kernel block
            post = gpytorch_explain.PosteriorGradient(model)(xs)
            cross = kernel_derivatives.grad_cross(kernel, xs, model.train_inputs[0])
            assert len(calls) == 6  # grad_cross: 4 n D = 200 per point, budget // 2 = 100: 1 point per block
            assert post.lazy_covariance_matrix.lazy_rows
            assert len(quadrature.point_chunks(xs, model.train_inputs[0])) == 3
            post_cov = post.covariance_matrix
    torch.testing.assert_close(cross, ref_cross, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(post.mean, ref_post.mean, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(post_cov, ref_post.covariance_matrix, rtol=1e-12, atol=1e-13)


def test_small_budget_chunks_gpx_inducing_paths_with_equal_results():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(40, 3, generator=gen, dtype=DT)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(40, generator=gen, dtype=DT)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(DT)
    lik.noise = 0.05
    base = ScaleKernel(RBFKernel()).to(DT)
    ipk = InducingPointKernel(base, inducing_points=torch.randn(6, 3, generator=gen, dtype=DT), likelihood=lik)
    model = gpytorch_explain.GPXModel(x, y, likelihood=lik, base_kernel=ipk)
    xs = torch.randn(5, 3, generator=gen, dtype=DT)

    def run():
        model.train()
        loss = -gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)(model(x), y)
        model.eval()
        with torch.no_grad():
            post = model.predict_weights(xs)
            return loss.detach(), post.mean, post.covariance_matrix, model(xs).mean.detach()

    ref = run()
    with S.max_block_elements(16):  # row chunks of 4 // (3 * 6): one row; feature blocks of 16 // 6 = 2 rows
        assert len(list(inducing_module._row_chunks(40, 18))) == 40
        out = run()
    for a, b in zip(out, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
