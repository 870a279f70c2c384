"""GPX with a KISS-GP base kernel through exact grid features (K_SKI = ΦΦᵀ, Woodbury solves): the features, the
marginal likelihood and its gradients, the weight posterior and the frozen eval-mode grid, all against a dense
brute-force SKI built from GPyTorch's interpolation weights and an exactly evaluated grid Gram (float64)."""

import math
import warnings

import gpytorch
import pytest
import torch
from gpytorch.kernels import (
    AdditiveStructureKernel,
    GridInterpolationKernel,
    ProductStructureKernel,
    RBFKernel,
    ScaleKernel,
)
from gpytorch.utils.grid import create_grid
from gpytorch.utils.interpolation import Interpolation
from linear_operator.operators import MatmulLinearOperator
from linear_operator.utils.warnings import NumericalWarning

import gpytorch_explain
from gpytorch_explain import GPXModel
from gpytorch_explain import settings as explain_settings
from gpytorch_explain.kernels import grid_features, supports_grid_features
from gpytorch_explain.operators import GPXInducingLinearOperator
from gpytorch_explain.operators.grid_interpolated_linear_operator import _GridInterpolatedLinearOperator
from tests.helpers import generator as _gen

# GPyTorch 1.15 deprecates AdditiveStructureKernel / ProductStructureKernel (and the last_dim_is_batch argument
# they use); GPX supports them while GPyTorch does (see docs/numerical_notes.md), so these tests filter it.
pytestmark = [
    pytest.mark.filterwarnings("ignore:AdditiveStructureKernel is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:ProductStructureKernel is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The last_dim_is_batch argument is deprecated:DeprecationWarning"),
]

DT = torch.float64


def _interp_matrix(grid, x):
    """Dense interpolation weights W (n x G) from GPyTorch's cubic interpolation on ``grid``."""
    idx, val = Interpolation().interpolate(grid, x)
    size = math.prod(g.numel() for g in grid)
    w = torch.zeros(x.size(0), size, dtype=x.dtype)
    w.scatter_add_(1, idx, val)
    return w


def _rbf(a, b, lengthscale):
    return torch.exp(-0.5 * ((a.unsqueeze(-2) - b.unsqueeze(-3)) / lengthscale).square().sum(-1))


def _ski_dense(kernel, x1, x2):
    """Brute-force SKI covariance W₁ K_UU W₂ᵀ, with K_UU the RBF evaluated on every pair of grid points."""
    scale = torch.ones((), dtype=DT)
    while isinstance(kernel, ScaleKernel):
        scale = scale * kernel.outputscale.reshape(())
        kernel = kernel.base_kernel
    if isinstance(kernel, ProductStructureKernel):  # ⊙_j W₁⁽ʲ⁾ K_UU W₂⁽ʲ⁾ᵀ, one 1-D grid per dimension
        gik = kernel.base_kernel
        g = gik.grid[0].unsqueeze(-1)
        kuu = _rbf(g, g, gik.base_kernel.lengthscale.reshape(-1))
        total = 1
        for j in range(x1.size(-1)):
            w1 = _interp_matrix(gik.grid, x1[:, j : j + 1])
            w2 = _interp_matrix(gik.grid, x2[:, j : j + 1])
            total = total * (w1 @ kuu @ w2.T)
        return scale * total
    if isinstance(kernel, AdditiveStructureKernel):
        gik = kernel.base_kernel
        g = gik.grid[0].unsqueeze(-1)
        kuu = _rbf(g, g, gik.base_kernel.lengthscale.reshape(-1))
        total = 0
        for j in range(x1.size(-1)):
            w1 = _interp_matrix(gik.grid, x1[:, j : j + 1])
            w2 = _interp_matrix(gik.grid, x2[:, j : j + 1])
            total = total + w1 @ kuu @ w2.T
        return scale * total
    # K_UU = K⁽¹⁾ ⊗ ... ⊗ K⁽ᴰ⁾ in the order of GPyTorch's interpolation index (the last dimension varies fastest),
    # applied factor by factor to W₁ reshaped to (n, G₁, ..., G_D)
    ell = kernel.base_kernel.lengthscale.reshape(-1).expand(len(kernel.grid))
    factors = [_rbf(g.unsqueeze(-1), g.unsqueeze(-1), ell[j]) for j, g in enumerate(kernel.grid)]
    w1 = _interp_matrix(kernel.grid, x1)
    t = w1.reshape(x1.size(0), *(g.numel() for g in kernel.grid))
    for j, f in enumerate(factors):
        t = torch.movedim(torch.tensordot(t, f, dims=([j + 1], [0])), -1, j + 1)
    return scale * t.reshape(x1.size(0), -1) @ _interp_matrix(kernel.grid, x2).T


def _kernel(name):
    if name == "1d":
        k = GridInterpolationKernel(RBFKernel(), grid_size=60, num_dims=1)
        k.base_kernel.lengthscale = 0.5
        return k.to(DT), 1
    if name == "2d_ard_scaled":
        k = ScaleKernel(GridInterpolationKernel(RBFKernel(ard_num_dims=2), grid_size=[30, 25], num_dims=2))
        k.base_kernel.base_kernel.lengthscale = torch.tensor([[0.7, 1.1]])
        k.outputscale = 1.7
        return k.to(DT), 2
    if name == "3d":
        k = GridInterpolationKernel(RBFKernel(ard_num_dims=3), grid_size=12, num_dims=3)
        k.base_kernel.lengthscale = 1.5
        return k.to(DT), 3
    if name == "additive":
        k = ScaleKernel(AdditiveStructureKernel(GridInterpolationKernel(RBFKernel(), grid_size=50, num_dims=1), 3))
        k.base_kernel.base_kernel.base_kernel.lengthscale = 0.8
        k.outputscale = 0.6
        return k.to(DT), 3
    if name == "product":
        k = ScaleKernel(ProductStructureKernel(GridInterpolationKernel(RBFKernel(), grid_size=24, num_dims=1), 3))
        k.base_kernel.base_kernel.base_kernel.lengthscale = 2.0
        k.outputscale = 0.8
        return k.to(DT), 3
    raise ValueError(name)


KERNELS = ["1d", "2d_ard_scaled", "3d", "additive", "product"]


@pytest.mark.parametrize("name", KERNELS)
def test_features_reproduce_the_ski_covariance(name):
    kernel, dims = _kernel(name)
    x = torch.randn(80, dims, dtype=DT, generator=_gen(0))
    phi, none = grid_features(kernel, x)  # training mode: the grid is fitted to x, as GPyTorch does
    assert none is None and phi.size(0) == 80
    gik = [m for m in kernel.modules() if isinstance(m, GridInterpolationKernel)][0]
    per_term = math.prod(g.numel() for g in gik.grid)
    assert phi.size(1) <= per_term ** (dims if name == "product" else 1) * (dims if name == "additive" else 1)
    ref = _ski_dense(kernel, x, x)
    torch.testing.assert_close(phi @ phi.T, ref, rtol=1e-9, atol=1e-10)
    if name in ("1d", "additive"):  # GPyTorch's own KISS-GP (one-dimensional grids: no factor order to get wrong)
        torch.testing.assert_close(phi @ phi.T, kernel(x).to_dense(), rtol=1e-9, atol=1e-9)

    kernel.eval()  # the grid stays; test points inside it
    xt = 0.5 * torch.randn(7, dims, dtype=DT, generator=_gen(1))
    p1, p2 = grid_features(kernel, xt, x)
    torch.testing.assert_close(p1 @ p2.T, _ski_dense(kernel, xt, x), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(p2, phi)  # the same grid and root in eval mode


@pytest.mark.parametrize("dims", [2, 3])
def test_features_interpolate_the_exact_kernel_with_unequal_grids(dims):
    """Grids of different sizes and spans per dimension, ARD lengthscales: ΦΦᵀ must approach the exact RBF as the
    grid is refined (the Kronecker factors follow the interpolation's index order)."""
    x = torch.randn(200, dims, dtype=DT, generator=_gen(3)).clamp(-3, 3)
    lengthscale = torch.tensor([0.7, 1.3, 1.0][:dims], dtype=DT)
    exact = _rbf(x, x, lengthscale)
    errors = []
    for sizes in ([14, 12, 13][:dims], [40, 36, 38][:dims] if dims == 2 else [30, 28, 29]):
        bounds = [(-3.5, 3.5), (-4.5, 4.0), (-3.2, 3.9)][:dims]
        kernel = GridInterpolationKernel(
            RBFKernel(ard_num_dims=dims), grid_size=sizes, num_dims=dims, grid_bounds=bounds
        )
        kernel = kernel.to(DT)
        kernel.update_grid(create_grid(kernel.grid_sizes, kernel.grid_bounds, dtype=DT))  # exactly uniform in float64
        kernel.base_kernel.lengthscale = lengthscale
        kernel.eval()
        with explain_settings.grid_root_tolerance(1e-14):
            phi, _ = grid_features(kernel, x)
        torch.testing.assert_close(phi @ phi.T, _ski_dense(kernel, x, x), rtol=1e-8, atol=1e-9)
        errors.append((phi @ phi.T - exact).abs().max().item())
    assert errors[1] < errors[0] / 8 and errors[1] < 5e-3, errors  # cubic interpolation: refining the grid 2.2x


def test_root_tolerance_drops_only_negligible_eigenpairs():
    kernel, dims = _kernel("2d_ard_scaled")
    x = torch.randn(50, dims, dtype=DT, generator=_gen(2))
    with explain_settings.grid_root_tolerance(0.0):
        full, _ = grid_features(kernel, x)
    with explain_settings.grid_root_tolerance(1e-6):
        short, _ = grid_features(kernel, x)
    assert short.size(1) < full.size(1)
    lam_max = 1.7 * 30 * 25  # trace bound on the largest eigenvalue of the scaled grid Gram
    assert (short @ short.T - full @ full.T).abs().max() <= 1e-6 * lam_max * 16


def _model(name, n=120, seed=0):
    kernel, dims = _kernel(name)
    gen = _gen(seed)
    x = torch.randn(n, dims, dtype=DT, generator=gen)
    z = torch.randn(n, 2, dtype=DT, generator=gen)
    y = (torch.sin(x[:, :1]) * z).sum(-1) + 0.1 * torch.randn(n, dtype=DT, generator=gen)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(DT)
    lik.noise = 0.03
    model = GPXModel(x, y, z, likelihood=lik, base_kernel=kernel)
    model.weight_noise = 0.02
    return model, x, y, z


def _dense_c(model, x, z):
    k = _ski_dense(model.base_kernel, x, x)
    n = x.size(0)
    eye = torch.eye(n, dtype=DT)
    return model.likelihood.noise * eye + (k + model.weight_noise * eye) * (z @ z.T)


@pytest.mark.parametrize("name", ["2d_ard_scaled", "additive", "product"])
@pytest.mark.parametrize("dense_limit", [0, 10_000])
def test_marginal_likelihood_and_gradients(name, dense_limit):
    model, x, y, z = _model(name)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    with explain_settings.max_cholesky_size(dense_limit), gpytorch.settings.max_cholesky_size(dense_limit):
        out = model(x, z)
        assert isinstance(out.lazy_covariance_matrix.evaluate_kernel(), GPXInducingLinearOperator)
        value = mll(out, y)
    grads = torch.autograd.grad(value, params)

    c = _dense_c(model, x, z)
    ref = torch.distributions.MultivariateNormal(torch.zeros_like(y), c).log_prob(y) / y.numel()
    ref_grads = torch.autograd.grad(ref, params)
    torch.testing.assert_close(value, ref, rtol=1e-9, atol=1e-10)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["1d", "2d_ard_scaled", "additive", "product"])
@pytest.mark.parametrize("dense_limit", [0, 10_000])
def test_weight_posterior_and_latent_predictive(name, dense_limit):
    model, x, y, z = _model(name)
    model.eval()
    m = 6
    xt = 0.6 * torch.randn(m, x.size(1), dtype=DT, generator=_gen(5))
    zt = torch.randn(m, 2, dtype=DT, generator=_gen(6))
    with (
        torch.no_grad(),
        explain_settings.max_cholesky_size(dense_limit),
        gpytorch.settings.max_cholesky_size(dense_limit),
    ):
        post = model.predict_weights(xt)
        mean, cov, var = post.mean, post.covariance_matrix, post.variance
        latent = model(xt, zt)
        f_mean, f_var = latent.mean, latent.variance

        c = _dense_c(model, x, z)
        k_sx = _ski_dense(model.base_kernel, xt, x)
        k_ss = _ski_dense(model.base_kernel, xt, xt)
        d = z.size(1)
        b = (k_sx.T.unsqueeze(-1) * z.unsqueeze(1)).reshape(x.size(0), m * d)  # B[i, p·d + l] = k(x*_p, x_i) z_il
        ref_mean = (b.T @ torch.linalg.solve(c, y)).reshape(m, d)
        prior = torch.kron(k_ss + model.weight_noise * torch.eye(m, dtype=DT), torch.eye(d, dtype=DT))
        ref_cov = prior - b.T @ torch.linalg.solve(c, b)
    torch.testing.assert_close(mean, ref_mean, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(cov, ref_cov, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(var, ref_cov.diagonal().reshape(m, d), rtol=1e-7, atol=1e-9)
    # the latent f* = w*ᵀz* from the same posterior
    torch.testing.assert_close(f_mean, (mean * zt).sum(-1), rtol=1e-8, atol=1e-9)
    blocks = ref_cov.reshape(m, d, m, d).diagonal(dim1=0, dim2=2).permute(2, 0, 1)
    ref_f_var = torch.einsum("pi,pij,pj->p", zt, blocks, zt)
    torch.testing.assert_close(f_var, ref_f_var, rtol=1e-7, atol=1e-9)


def test_eval_mode_grid_stays_unless_test_points_leave_it():
    model, x, y, z = _model("2d_ard_scaled")
    model.eval()
    xt = 0.5 * torch.randn(10, 2, dtype=DT, generator=_gen(7))
    gik = model.base_kernel.base_kernel
    grid_before = [g.clone() for g in gik.grid]
    with torch.no_grad():
        first = model.predict_weights(xt[:4])
        both = model.predict_weights(xt)  # other test points inside the grid do not move it
        torch.testing.assert_close(both.mean[:4], first.mean)
        torch.testing.assert_close(both.variance[:4], first.variance)
        assert all(torch.equal(a, b) for a, b in zip(gik.grid, grid_before, strict=True))

        # a test point outside: the grid is refitted to span it, and the caches are rebuilt on the new grid
        far = torch.tensor([[6.0, -5.0]], dtype=DT)
        post = model.predict_weights(torch.cat([xt[:3], far]))
        assert gik.grid[0].max() > 6.0 and gik.grid[1].min() < -5.0
        latent = model(far, torch.ones(1, 2, dtype=DT))
        xs = torch.cat([xt[:3], far])
        c = _dense_c(model, x, z)
        k_sx = _ski_dense(model.base_kernel, xs, x)
        b = (k_sx.T.unsqueeze(-1) * z.unsqueeze(1)).reshape(x.size(0), -1)
        ref_mean = (b.T @ torch.linalg.solve(c, y)).reshape(4, 2)
        ref_var = (
            _ski_dense(model.base_kernel, xs, xs).diagonal().repeat_interleave(2)
            + model.weight_noise
            - (b * torch.linalg.solve(c, b)).sum(0)
        ).reshape(4, 2)
    torch.testing.assert_close(post.mean, ref_mean, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(post.variance, ref_var, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(latent.mean, post.mean[-1:].sum(-1), rtol=1e-8, atol=1e-9)
    # the kernel alone, in eval mode, refuses inputs outside its grid instead of moving it under cached solves
    with pytest.raises(ValueError, match="outside the KISS-GP grid"):
        grid_features(model.base_kernel, torch.tensor([[60.0, 0.0]], dtype=DT))


def test_features_in_row_blocks_keep_memory_and_gradients(monkeypatch):
    from gpytorch_explain.operators import grid_interpolated_linear_operator as ski_features

    kernel, dims = _kernel("2d_ard_scaled")
    x = torch.randn(40, dims, dtype=DT, generator=_gen(9))
    phi, _ = grid_features(kernel, x)
    lengthscale = kernel.base_kernel.base_kernel.raw_lengthscale
    ref_grad = torch.autograd.grad((phi.sin()).sum(), lengthscale)[0]
    with gpytorch_explain.settings.max_block_elements(7 * phi.size(1)):  # blocks of 7 rows
        assert len(ski_features._blocks(40, phi.size(1))) == 6
        blocked, _ = grid_features(kernel, x, max_width=phi.size(1))
    torch.testing.assert_close(blocked, phi, rtol=1e-12, atol=1e-13)
    grad = torch.autograd.grad((blocked.sin()).sum(), lengthscale)[0]
    torch.testing.assert_close(grad, ref_grad, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(phi @ phi.T, _ski_dense(kernel, x, x), rtol=1e-9, atol=1e-10)


def test_model_used_in_eval_mode_without_training():
    """GPXModel fits a dynamic grid to the training inputs when it is built: eval right away works."""
    model, x, y, z = _model("1d")
    model.eval()
    with torch.no_grad():
        post = model.predict_weights(x[:5])
    assert torch.isfinite(post.mean).all() and (post.variance > 0).all()


def test_wide_roots_and_the_switch_fall_back_to_the_lazy_operator():
    model, x, y, z = _model("additive", n=40)
    model.train()
    inputs = model.train_inputs[0]
    with explain_settings.max_grid_feature_width(2):
        wide = model.covar_module(inputs).evaluate_kernel()  # settings apply at evaluation
    with explain_settings.use_grid_features(False):
        off = model.covar_module(inputs).evaluate_kernel()
    feat = model.covar_module(inputs).evaluate_kernel()
    assert isinstance(feat, GPXInducingLinearOperator)
    for op in (wide, off):
        assert not isinstance(op, GPXInducingLinearOperator)
        # GPyTorch's grid Gram is built from a Toeplitz column; it agrees with the exact one to round-off here
        torch.testing.assert_close(op.to_dense(), feat.to_dense(), rtol=1e-8, atol=1e-9)


def test_supported_structures():
    gik = GridInterpolationKernel(RBFKernel(), grid_size=10, num_dims=1)
    assert supports_grid_features(gik)
    assert supports_grid_features(ScaleKernel(ScaleKernel(gik)))
    assert supports_grid_features(AdditiveStructureKernel(gik, 3))
    assert supports_grid_features(ScaleKernel(ProductStructureKernel(gik, 3)))
    assert not supports_grid_features(ProductStructureKernel(ScaleKernel(gik), 3))
    assert not supports_grid_features(RBFKernel())
    assert not supports_grid_features(GridInterpolationKernel(RBFKernel(), grid_size=10, num_dims=1, active_dims=[0]))
    batch = GridInterpolationKernel(RBFKernel(batch_shape=torch.Size([2])), grid_size=10, num_dims=1)
    assert not supports_grid_features(batch)
    gik2 = GridInterpolationKernel(RBFKernel(), grid_size=10, num_dims=2)
    assert not supports_grid_features(ProductStructureKernel(gik2, 4))
    with pytest.raises(TypeError, match="grid_features does not support ProductStructureKernel"):
        grid_features(ProductStructureKernel(gik2, 4), torch.randn(4, 4))


def test_float32_matches_float64():
    model64, x, y, z = _model("1d")
    kernel, _ = _kernel("1d")
    lik = gpytorch.likelihoods.GaussianLikelihood()
    lik.noise = 0.03
    model32 = GPXModel(x.float(), y.float(), z.float(), likelihood=lik, base_kernel=kernel.float())
    model32.weight_noise = 0.02
    xt = 0.5 * torch.randn(5, 1, dtype=DT, generator=_gen(8))
    with torch.no_grad(), explain_settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0):
        p64 = model64.eval().predict_weights(xt)
        p32 = model32.eval().predict_weights(xt.float())
    assert p32.mean.dtype == torch.float32
    torch.testing.assert_close(p32.mean.double(), p64.mean, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(p32.variance.double(), p64.variance, rtol=1e-2, atol=1e-3)


def test_falling_back_to_gpytorchs_multidimensional_kissgp_warns():
    """GPyTorch's own 2-D KISS-GP multiplies the grid Grams in the opposite order to its interpolation index (gpytorch
    1.15): with ARD lengthscales it evaluates another kernel. GPX says so when it has to use that operator."""
    model, x, y, z = _model("2d_ard_scaled", n=30)
    model.train()
    with explain_settings.use_grid_features(False), pytest.warns(RuntimeWarning, match="opposite order"):
        model.covar_module(model.train_inputs[0]).evaluate_kernel()
    one_d, *_ = _model("additive", n=30)
    with explain_settings.use_grid_features(False), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        one_d.covar_module(one_d.train_inputs[0]).evaluate_kernel()  # 1-D grids: nothing to warn about


def test_product_structure_matches_the_product_of_one_dimensional_skis_beyond_the_dense_limit():
    """ProductStructureKernel over a 1-D grid through grid features: the face-splitting identity gives the product
    of the per-dimension SKI covariances exactly, also with more rows than GPyTorch's dense limit (where
    linear_operator 0.6's batch product pads an odd number of Lanczos roots with 1/sqrt(n) columns and scales the
    covariance by rank/n). Falling back to GPyTorch's operator warns."""
    kernel, dims = _kernel("product")
    x = torch.randn(900, dims, dtype=DT, generator=_gen(11))
    with gpytorch.settings.max_cholesky_size(100):
        phi, _ = grid_features(kernel, x)
    rows = slice(0, 150)
    ref = _ski_dense(kernel, x[rows], x[rows])
    torch.testing.assert_close(phi[rows] @ phi[rows].T, ref, rtol=1e-9, atol=1e-10)
    exact = kernel.outputscale * _rbf(x[rows], x[rows], kernel.base_kernel.base_kernel.base_kernel.lengthscale)
    assert (phi[rows] @ phi[rows].T - exact).abs().max() < 1e-3  # and SKI interpolates the exact product RBF

    model, *_ = _model("product", n=30)
    model.train()
    with explain_settings.use_grid_features(False), pytest.warns(RuntimeWarning, match="ProductStructureKernel"):
        model.covar_module(model.train_inputs[0]).evaluate_kernel()


def test_product_structure_root_too_wide_is_detected_without_forming_it():
    """The kept eigenvalue products are enumerated one dimension at a time and abandoned past the width limit, so
    a product over many dimensions returns ``None`` instead of forming G^D candidates."""
    gik = GridInterpolationKernel(RBFKernel(), grid_size=100, num_dims=1).to(DT)
    gik.base_kernel.lengthscale = 0.3
    kernel = ProductStructureKernel(gik, 12)
    x = torch.randn(20, 12, dtype=DT, generator=_gen(12))
    assert grid_features(kernel, x, max_width=500) is None
    with pytest.raises(ValueError, match="grid root has more than"):
        grid_features(kernel, x)


@pytest.mark.parametrize("name", ["2d_ard_scaled", "3d", "product"])
def test_roots_too_wide_for_features_use_the_interpolated_grid_operator(name):
    """Past max_grid_feature_width, multi-dimensional and product-structure grids go through GPX's own interpolated
    operator (Kronecker factors in the interpolation's order, untruncated): exact SKI, CG-ready, no warning; the
    marginal likelihood on the CG path and its gradients match the dense brute force."""
    model, x, y, z = _model(name, n=60)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    with explain_settings.max_grid_feature_width(2), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", NumericalWarning)  # CG's own tolerance messages
        ref = _dense_c(model, x, z) - model.likelihood.noise * torch.eye(60, dtype=DT)
        # up to the dense limit: C is densified, K = ΦΦᵀ from the untruncated root; above it: the grid operator
        for limit, base_type in ((10_000, MatmulLinearOperator), (0, _GridInterpolatedLinearOperator)):
            with gpytorch.settings.max_cholesky_size(limit), explain_settings.max_cholesky_size(limit):
                op = model.covar_module(model.train_inputs[0]).evaluate_kernel()
                diag = model.covar_module(model.train_inputs[0], diag=True)
            assert not isinstance(op, GPXInducingLinearOperator)
            assert isinstance(op._linear_op.base_linear_op, base_type)
            torch.testing.assert_close(op.to_dense(), ref, rtol=1e-9, atol=1e-10)
            torch.testing.assert_close(diag, ref.diagonal(), rtol=1e-9, atol=1e-10)
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
        with (
            gpytorch.settings.max_cholesky_size(0),
            explain_settings.max_cholesky_size(0),
            gpytorch.settings.max_lanczos_quadrature_iterations(60),
            gpytorch.settings.num_trace_samples(64),
            gpytorch.settings.cg_tolerance(1e-4),
        ):
            torch.manual_seed(0)
            value = mll(model(x, z), y)
        grads = torch.autograd.grad(value, params)
    c = _dense_c(model, x, z)
    dense = torch.distributions.MultivariateNormal(torch.zeros_like(y), c).log_prob(y) / y.numel()
    ref_grads = torch.autograd.grad(dense, params)
    # stochastic Lanczos quadrature for the log-determinant: a loose tolerance, but a wrong kernel is off by far more
    assert abs(value.item() - dense.item()) < 0.05 * abs(dense.item())
    for g, r in zip(grads, ref_grads, strict=True):
        assert (g - r).norm() < 0.25 * r.norm() + 1e-3


@pytest.mark.parametrize("name", ["2d_ard_scaled", "3d", "product"])
def test_grid_operator_is_the_brute_force_ski_with_gradients(name):
    from gpytorch_explain.kernels import grid_operator

    kernel, dims = _kernel(name)
    x = torch.randn(70, dims, dtype=DT, generator=_gen(13))
    op = grid_operator(kernel, x)
    v = torch.randn(70, 3, dtype=DT, generator=_gen(14))
    ref = _ski_dense(kernel, x, x)
    torch.testing.assert_close(op @ v, ref @ v, rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(op.diagonal(), ref.diagonal(), rtol=1e-10, atol=1e-11)
    params = list(kernel.parameters())
    grads = torch.autograd.grad((v * (op @ v)).sum(), params)
    ref_grads = torch.autograd.grad((v * (ref @ v)).sum(), params)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-10)
    kernel.eval()
    xt = 0.5 * torch.randn(9, dims, dtype=DT, generator=_gen(15))
    torch.testing.assert_close(
        grid_operator(kernel, xt, x).to_dense(), _ski_dense(kernel, xt, x), rtol=1e-10, atol=1e-11
    )
    # structures GPyTorch evaluates exactly keep GPyTorch's operator
    for other in ("1d", "additive"):
        assert grid_operator(_kernel(other)[0], torch.randn(5, _kernel(other)[1], dtype=DT)) is None


@pytest.mark.parametrize("name", ["2d_ard_scaled", "product"])
def test_weight_posterior_through_the_grid_operator(name):
    model, x, y, z = _model(name)
    model.eval()
    m, d = 5, 2
    xt = 0.6 * torch.randn(m, x.size(1), dtype=DT, generator=_gen(16))
    with torch.no_grad(), explain_settings.max_grid_feature_width(2), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        post = model.predict_weights(xt)
        mean, var = post.mean, post.variance
        c = _dense_c(model, x, z)
        k_sx = _ski_dense(model.base_kernel, xt, x)
        b = (k_sx.T.unsqueeze(-1) * z.unsqueeze(1)).reshape(x.size(0), m * d)
        ref_mean = (b.T @ torch.linalg.solve(c, y)).reshape(m, d)
        prior = _ski_dense(model.base_kernel, xt, xt).diagonal().repeat_interleave(d) + model.weight_noise
        ref_var = (prior - (b * torch.linalg.solve(c, b)).sum(0)).reshape(m, d)
    torch.testing.assert_close(mean, ref_mean, rtol=1e-7, atol=1e-8)
    torch.testing.assert_close(var, ref_var, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["2d_ard_scaled", "product"])
def test_grid_operator_entry_reads_for_the_preconditioner(name):
    """Entries in a few rows or a few columns (pivoted Cholesky) come from products with unit vectors; the diagonal
    factorises over dimensions; gradients flow through all three; a slice keeps the fast reads."""
    from gpytorch_explain.kernels import grid_operator

    kernel, dims = _kernel(name)
    x = torch.randn(90, dims, dtype=DT, generator=_gen(17))
    op = grid_operator(kernel, x)
    ref = _ski_dense(kernel, x, x)
    rows = torch.tensor([3, 3, 40, 7])
    cols = torch.arange(90)
    torch.testing.assert_close(op[rows.unsqueeze(-1), cols], ref[rows.unsqueeze(-1), cols], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(op[cols.unsqueeze(-1), rows], ref[cols.unsqueeze(-1), rows], rtol=1e-10, atol=1e-12)
    many = torch.randint(0, 90, (200,), generator=_gen(18))  # neither few rows nor few columns: GPyTorch's path
    torch.testing.assert_close(op[many, many.flip(0)], ref[many, many.flip(0)], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(op.diagonal(), ref.diagonal(), rtol=1e-10, atol=1e-12)
    params = list(kernel.parameters())
    for got, want in ((op[rows.unsqueeze(-1), cols], ref[rows.unsqueeze(-1), cols]), (op.diagonal(), ref.diagonal())):
        g = torch.autograd.grad(got.sin().sum(), params, retain_graph=True)
        r = torch.autograd.grad(want.sin().sum(), params, retain_graph=True)
        for a, b in zip(g, r, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    sliced = op[10:50, 10:50]
    torch.testing.assert_close(sliced.to_dense(), ref[10:50, 10:50], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(sliced.diagonal(), ref.diagonal()[10:50], rtol=1e-10, atol=1e-12)
