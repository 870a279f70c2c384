"""GPX with an inducing-point (SGPR) base kernel: the Woodbury operator, the collapsed bound, the
inducing-space weight posterior; all against dense brute force in float64."""

import unittest

import gpytorch
import pytest
import torch
from gpytorch.kernels import InducingPointKernel, RBFKernel, ScaleKernel
from linear_operator.operators import DiagLinearOperator, LowRankRootAddedDiagLinearOperator
from linear_operator.test.linear_operator_test_case import LinearOperatorTestCase

import gpytorch_explain
import gpytorch_explain.operators.gpx_inducing_linear_operator as inducing_module
from gpytorch_explain import GPXModel
from gpytorch_explain import settings as explain_settings
from gpytorch_explain.operators import GPXInducingLinearOperator, InducingWeightPosteriorLinearOperator

DT = torch.float64


# ---------------------------------------------------------------------------------------------- operator
class TestGPXInducingLinearOperator(LinearOperatorTestCase, unittest.TestCase):
    seed = 0
    should_test_sample = True
    should_call_cg = False  # solves and log determinants are exact (Woodbury)

    def create_linear_op(self):
        phi = torch.randn(6, 3, dtype=torch.float32).requires_grad_(True)
        z = torch.randn(6, 2, dtype=torch.float32).requires_grad_(True)
        diag = (torch.rand(6, dtype=torch.float32) + 0.5).requires_grad_(True)
        return GPXInducingLinearOperator(phi, z, diag)

    def evaluate_linear_op(self, linear_op):
        phi, z = linear_op.phi, linear_op.z
        return (phi @ phi.mT) * (z @ z.mT) + torch.diag_embed(linear_op.diag_values)


class TestGPXInducingLinearOperatorBatch(TestGPXInducingLinearOperator):
    seed = 1

    def create_linear_op(self):
        phi = torch.randn(3, 6, 3, dtype=torch.float32).requires_grad_(True)
        z = torch.randn(3, 6, 2, dtype=torch.float32).requires_grad_(True)
        diag = (torch.rand(3, 6, dtype=torch.float32) + 0.5).requires_grad_(True)
        return GPXInducingLinearOperator(phi, z, diag)


def _dense(phi, z, diag):
    return (phi @ phi.mT) * (z @ z.mT) + torch.diag_embed(diag)


@pytest.mark.parametrize("chunk", [None, 7])
def test_woodbury_solve_logdet_and_gradients(monkeypatch, chunk):
    if chunk is not None:  # several row chunks (with checkpointing in the backward pass): budget // 4 = chunk
        monkeypatch.setattr(gpytorch_explain.settings.max_block_elements, "_global_value", 4 * chunk)
        assert gpytorch_explain.settings.block_budget("gpx_inducing") == chunk
    gen = torch.Generator().manual_seed(0)
    n, m_ind, d = 40, 5, 3
    phi = torch.randn(n, m_ind, generator=gen, dtype=DT).requires_grad_(True)
    z = torch.randn(n, d, generator=gen, dtype=DT)
    diag = (0.05 + torch.rand(n, generator=gen, dtype=DT)).requires_grad_(True)
    y = torch.randn(n, 1, generator=gen, dtype=DT)

    op = GPXInducingLinearOperator(phi, z, diag)
    inv_quad, logdet = op.inv_quad_logdet(inv_quad_rhs=y, logdet=True)
    grads = torch.autograd.grad(inv_quad + logdet, (phi, diag))

    dense = _dense(phi, z, diag)
    ref_quad = (y * torch.linalg.solve(dense, y)).sum()
    ref_logdet = torch.linalg.slogdet(dense)[1]
    ref_grads = torch.autograd.grad(ref_quad + ref_logdet, (phi, diag))
    assert torch.allclose(inv_quad, ref_quad, rtol=1e-10)
    assert torch.allclose(logdet, ref_logdet, rtol=1e-10)
    for g, r in zip(grads, ref_grads, strict=True):
        assert torch.allclose(g, r, rtol=1e-8, atol=1e-10)
    rhs = torch.randn(n, 4, generator=gen, dtype=DT)
    assert torch.allclose(op.solve(rhs), torch.linalg.solve(dense, rhs), rtol=1e-9, atol=1e-10)


def test_blocks_keep_sample_diagonal_semantics():
    gen = torch.Generator().manual_seed(1)
    phi, z = torch.randn(10, 3, generator=gen, dtype=DT), torch.randn(10, 2, generator=gen, dtype=DT)
    diag = torch.rand(10, generator=gen, dtype=DT) + 0.1
    op = GPXInducingLinearOperator(phi, z, diag)
    dense = _dense(phi, z, diag)
    train = op[:6, :6]
    assert isinstance(train, GPXInducingLinearOperator)
    assert torch.allclose(train.to_dense(), dense[:6, :6])
    cross = op[6:, :6]
    assert torch.allclose(cross.to_dense(), dense[6:, :6])  # no diagonal in an off-diagonal block
    noisy = op + DiagLinearOperator(torch.full((10,), 0.3, dtype=DT))
    assert isinstance(noisy, GPXInducingLinearOperator)
    assert torch.allclose(noisy.to_dense(), dense + 0.3 * torch.eye(10, dtype=DT))
    with pytest.raises(ValueError, match="positive diagonal"):
        GPXInducingLinearOperator(phi, z, torch.zeros(10, dtype=DT)).solve(torch.ones(10, dtype=DT))
    with pytest.raises(ValueError, match="Inconsistent shapes"):
        GPXInducingLinearOperator(phi, z[:5], diag)


# ---------------------------------------------------------------------------------------------- model
def _model(n=50, m_ind=7, dims=3, separate_z=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dims, generator=gen, dtype=DT)
    z = torch.randn(n, 2, generator=gen, dtype=DT) if separate_z else None
    y = torch.randn(n, generator=gen, dtype=DT)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(DT)
    lik.noise = torch.tensor(0.05, dtype=DT)
    base = ScaleKernel(RBFKernel()).to(DT)
    base.outputscale = 1.3
    base.base_kernel.lengthscale = 0.9
    inducing = torch.randn(m_ind, dims, generator=gen, dtype=DT)
    ipk = InducingPointKernel(base, inducing_points=inducing, likelihood=lik)
    model = GPXModel(x, y, train_z=z, likelihood=lik, base_kernel=ipk)
    model.weight_noise = 0.07
    return model, x, (x if z is None else z), y


def _nystrom(model, a, b):
    ipk = model.base_kernel
    U = ipk.inducing_points.detach()
    k = ipk.base_kernel
    with torch.no_grad():
        return k(a, U).to_dense() @ torch.linalg.solve(k(U, U).to_dense(), k(U, b).to_dense())


def _brute_bound(model, x, z, y):
    """log N(y | 0, σy² I + (Q + σw² I) ⊙ ZZᵀ) − ½ Σ ||z_i||² (k_ii − q_ii) / (σy² + σw² ||z_i||²)."""
    n = x.size(0)
    s2, sw = model.likelihood.noise.item(), model.weight_noise.item()
    Q = _nystrom(model, x, x)
    C = s2 * torch.eye(n, dtype=DT) + (Q + sw * torch.eye(n, dtype=DT)) * (z @ z.T)
    zz = z.pow(2).sum(-1)
    with torch.no_grad():
        kdiag = model.base_kernel.base_kernel(x, diag=True)
    trace = zz * (kdiag - Q.diagonal())
    logp = torch.distributions.MultivariateNormal(torch.zeros(n, dtype=DT), C).log_prob(y)
    return logp - 0.5 * (trace / (s2 + sw * zz)).sum(), C


@pytest.mark.parametrize("separate_z", [False, True])
@pytest.mark.parametrize("limit", [0, 10_000])
def test_marginal_likelihood_is_the_gpx_collapsed_bound(separate_z, limit):
    model, x, z, y = _model(separate_z=separate_z)
    ref, _ = _brute_bound(model, x, z, y)
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    inputs = model.train_inputs[0]
    with explain_settings.max_cholesky_size(limit), gpytorch.settings.max_cholesky_size(limit):
        value = mll(model(inputs) if separate_z else model(x), y) * x.size(0)
    assert abs(value.item() - ref.item()) <= 1e-9 * abs(ref.item())


def test_bound_gradients_match_dense_autograd():
    model, x, z, y = _model(n=40)
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    params = [p for p in model.parameters() if p.requires_grad]
    with explain_settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0):
        grads = torch.autograd.grad(mll(model(x), y), params)
    with explain_settings.max_cholesky_size(10_000), gpytorch.settings.max_cholesky_size(10_000):
        ref = torch.autograd.grad(mll(model(x), y), params)
    for g, r in zip(grads, ref, strict=True):
        assert torch.allclose(g, r, rtol=1e-8, atol=1e-11)


def test_bound_is_below_the_exact_likelihood_and_tight_at_u_equals_x():
    """Titsias: the collapsed bound ≤ the exact GPX log likelihood, with equality when U = X."""
    model, x, z, y = _model(n=30, m_ind=5)
    base = model.base_kernel.base_kernel
    exact = GPXModel(x, y, likelihood=gpytorch.likelihoods.GaussianLikelihood().to(DT), base_kernel=base)
    exact.likelihood.noise = model.likelihood.noise.detach()
    exact.weight_noise = model.weight_noise.detach()
    exact.train()
    mll_exact = gpytorch.mlls.ExactMarginalLogLikelihood(exact.likelihood, exact)
    ref = mll_exact(exact(x), y).item()
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    with explain_settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0):
        assert mll(model(x), y).item() < ref
        model.base_kernel.inducing_points.data = x.clone()
        with gpytorch.settings.cholesky_jitter(double_value=1e-12):
            tight = mll(model(x), y).item()
    assert abs(tight - ref) <= 1e-6 * abs(ref)


def _brute_weights(model, x, z, y, xt, correction=True):
    """The dense joint posterior of w* (Titsias predictive: K** − Q** on the diagonal only)."""
    _, C = _brute_bound(model, x, z, y)
    m, d = xt.size(0), z.size(-1)
    sw = model.weight_noise.item()
    Qs, Qss = _nystrom(model, xt, x), _nystrom(model, xt, xt)
    P = Qss + sw * torch.eye(m, dtype=DT)
    if correction:
        with torch.no_grad():
            P = P + torch.diag(model.base_kernel.base_kernel(xt, diag=True) - Qss.diagonal())
    B = (Qs.unsqueeze(1) * z.T.unsqueeze(0)).reshape(m * d, -1).T  # B[i, p d + l] = Q(x_p, x_i) z_il
    mean = (B.T @ torch.linalg.solve(C, y)).reshape(m, d)
    cov = torch.kron(P, torch.eye(d, dtype=DT)) - B.T @ torch.linalg.solve(C, B)
    return mean, cov


@pytest.mark.parametrize("separate_z", [False, True])
@pytest.mark.parametrize("correction", [True, False])
def test_weight_posterior_in_inducing_space_matches_brute_force(separate_z, correction):
    model, x, z, y = _model(separate_z=separate_z)
    gen = torch.Generator().manual_seed(5)
    xt = torch.randn(6, x.size(-1), generator=gen, dtype=DT)
    zt = xt if not separate_z else torch.randn(6, z.size(-1), generator=gen, dtype=DT)
    ref_mean, ref_cov = _brute_weights(model, x, z, y, xt, correction)
    model.eval()
    d = z.size(-1)
    for limit in (0, 10_000):  # the inducing-space path and the dense Cholesky path
        model.prediction_strategy = None
        with (
            explain_settings.max_cholesky_size(limit),
            gpytorch.settings.max_cholesky_size(limit),
            gpytorch.settings.sgpr_diagonal_correction(correction),
            torch.no_grad(),
        ):
            post = model.predict_weights(xt)
            if limit == 0:
                assert isinstance(post.lazy_covariance_matrix, InducingWeightPosteriorLinearOperator)
                # one point takes the triangular-solve route, six the explicit L⁻¹ one (3·m·d vs dM = 7d)
                one = model.predict_weights(xt[:1])
                assert torch.allclose(one.covariance_matrix, ref_cov[:d, :d], rtol=1e-8, atol=1e-10)
                blocks1 = one.lazy_covariance_matrix.point_blocks()
                assert torch.allclose(blocks1[0], ref_cov[:d, :d], rtol=1e-8, atol=1e-10)
            assert torch.allclose(post.mean, ref_mean, rtol=1e-8, atol=1e-10)
            assert torch.allclose(post.covariance_matrix, ref_cov, rtol=1e-8, atol=1e-10)
            assert torch.allclose(post.variance, ref_cov.diagonal().reshape(6, d), rtol=1e-8, atol=1e-10)
            rhs = torch.randn(6 * d, 2, dtype=DT)
            assert torch.allclose(post.lazy_covariance_matrix @ rhs, ref_cov @ rhs, rtol=1e-8, atol=1e-10)
            # E[f*] = z*ᵀ E[w*] and Var[f*] = z*ᵀ Cov[w*] z*
            latent = model(xt) if not separate_z else model(xt, zt)
            blocks = post.lazy_covariance_matrix.point_blocks()
            assert torch.allclose(latent.mean, (zt * post.mean).sum(-1), rtol=1e-8, atol=1e-10)
            var = torch.einsum("pi,pij,pj->p", zt, blocks, zt)
            assert torch.allclose(latent.variance, var, rtol=1e-8, atol=1e-10)
            with gpytorch.settings.fast_pred_var():
                model.prediction_strategy = None
                fast = model.predict_weights(xt)
                assert torch.allclose(fast.variance, ref_cov.diagonal().reshape(6, d), rtol=1e-8, atol=1e-10)


def test_inducing_model_fits_above_the_dense_limit():
    """A short L-BFGS fit through the Woodbury path (n above the dense limit) lowers the loss."""
    gen = torch.Generator().manual_seed(3)
    n = 600
    x = torch.randn(n, 2, generator=gen, dtype=DT)
    y = x[:, 0] * torch.sin(x[:, 1]) + 0.1 * torch.randn(n, generator=gen, dtype=DT)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(DT)
    ipk = InducingPointKernel(ScaleKernel(RBFKernel()).to(DT), x[:20].clone(), likelihood=lik)
    model = GPXModel(x, y, likelihood=lik, base_kernel=ipk)
    with explain_settings.max_cholesky_size(100), gpytorch.settings.max_cholesky_size(100):
        model.fit(max_iter=15)
        assert model.fit_history[-1] < model.fit_history[0] - 0.1
        post = model.predict_weights(x[:5])
    assert isinstance(post.lazy_covariance_matrix, InducingWeightPosteriorLinearOperator)
    assert torch.isfinite(post.variance).all() and (post.variance > 0).all()


def test_model_adopts_its_likelihood_for_the_trace_term():
    gen = torch.Generator().manual_seed(4)
    x, y = torch.randn(20, 2, generator=gen, dtype=DT), torch.randn(20, generator=gen, dtype=DT)
    other = gpytorch.likelihoods.GaussianLikelihood().to(DT)
    ipk = InducingPointKernel(ScaleKernel(RBFKernel()).to(DT), x[:4].clone(), likelihood=other)
    model = GPXModel(x, y, base_kernel=ipk)
    assert model.base_kernel.likelihood is model.likelihood


@pytest.mark.parametrize("chunk", [None, 9])
def test_chunked_weighted_gram_gradients(monkeypatch, chunk):
    """The custom backward of R^T diag(w) R (row chunks, symmetric blocks) against autograd's gradcheck."""
    if chunk is not None:  # budget // 4 = chunk
        monkeypatch.setattr(gpytorch_explain.settings.max_block_elements, "_global_value", 4 * chunk)
        assert gpytorch_explain.settings.block_budget("gpx_inducing") == chunk
    gen = torch.Generator().manual_seed(2)
    phi = torch.randn(7, 3, generator=gen, dtype=DT, requires_grad=True)
    z = torch.randn(7, 2, generator=gen, dtype=DT, requires_grad=True)
    w = (torch.rand(7, generator=gen, dtype=DT) + 0.2).requires_grad_(True)
    assert torch.autograd.gradcheck(inducing_module._WeightedGram.apply, (phi, z, w))
    root = inducing_module._root_block(phi, z)
    assert torch.allclose(inducing_module._WeightedGram.apply(phi, z, w), (root * w.unsqueeze(-1)).T @ root)


def test_float32_inducing_path_agrees_with_float64():
    model, x, z, y = _model(n=80)
    xt = torch.randn(5, x.size(-1), generator=torch.Generator().manual_seed(8), dtype=DT)
    model.eval()
    with explain_settings.max_cholesky_size(0), gpytorch.settings.max_cholesky_size(0), torch.no_grad():
        ref = model.predict_weights(xt)
        model32 = model.train().float()  # train() clears the kernel's cached inducing factors
        model32.eval()
        model32.set_train_data(x.float(), y.float(), strict=False)
        post = model32.predict_weights(xt.float())
    assert post.mean.dtype == torch.float32
    scale = ref.mean.abs().max()
    assert (post.mean.double() - ref.mean).abs().max() <= 1e-3 * scale
    assert ((post.variance.double() - ref.variance).abs() / ref.variance).max() <= 1e-3


@pytest.mark.parametrize("grad", [False, True])
def test_inducing_features_in_row_blocks(monkeypatch, grad):
    """Φ computed in row blocks (preallocated without autograd, concatenated with it) equals one evaluation,
    gradients included."""
    from gpytorch_explain.kernels import gpx_kernel

    model, x, _, _ = _model(n=50)
    ipk = model.base_kernel
    ref = gpx_kernel.inducing_features(ipk, x)
    ref_grad = torch.autograd.grad(ref.sum(), ipk.inducing_points)[0]
    with torch.set_grad_enabled(grad), gpytorch_explain.settings.max_block_elements(7 * 12):  # 12 rows (M = 7)
        phi = gpx_kernel.inducing_features(ipk, x)  # in 5 blocks
    assert phi.requires_grad == grad
    assert torch.allclose(phi, ref, rtol=1e-12, atol=1e-14)
    if grad:
        assert torch.allclose(torch.autograd.grad(phi.sum(), ipk.inducing_points)[0], ref_grad, rtol=1e-10)


# GPyTorch's joint evaluation, the reference
@pytest.mark.filterwarnings("ignore:Negative variance values detected:linear_operator.utils.warnings.NumericalWarning")
@pytest.mark.parametrize("separate_z", [False, True])
@pytest.mark.parametrize("correction", [True, False])
def test_latent_predictive_in_feature_space_matches_the_joint_evaluation(separate_z, correction):
    """model(x, z) above the dense limit is computed from the weight posterior in inducing space (nothing m x n); it
    must equal GPyTorch's joint train/test evaluation: the full covariance, the mean and the predictive of y."""
    model, x, z, y = _model(separate_z=separate_z)
    gen = torch.Generator().manual_seed(6)
    xt = torch.randn(5, x.size(-1), generator=gen, dtype=DT)
    zt = xt if not separate_z else torch.randn(5, z.size(-1), generator=gen, dtype=DT)
    model.eval()
    with (
        explain_settings.max_cholesky_size(0),
        gpytorch.settings.max_cholesky_size(0),
        gpytorch.settings.sgpr_diagonal_correction(correction),
        torch.no_grad(),
    ):
        fast = model(xt) if not separate_z else model(xt, zt)
        assert isinstance(fast.lazy_covariance_matrix, LowRankRootAddedDiagLinearOperator)
        inputs = xt if not separate_z else torch.cat([xt, zt], -1)
        joint = gpytorch.models.ExactGP.__call__(model, inputs)
        torch.testing.assert_close(fast.mean, joint.mean, rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(fast.covariance_matrix, joint.covariance_matrix, rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(fast.variance, joint.variance, rtol=1e-8, atol=1e-10)
        pred = model.likelihood(fast)
        torch.testing.assert_close(pred.variance, joint.variance + model.likelihood.noise, rtol=1e-8, atol=1e-10)
        with gpytorch.settings.skip_posterior_variances():
            mean_only = model(xt) if not separate_z else model(xt, zt)
        torch.testing.assert_close(mean_only.mean, joint.mean, rtol=1e-9, atol=1e-11)
        assert (mean_only.variance <= 1e-9).all()  # zero, up to MultivariateNormal's variance floor
