"""Variational GPX (:class:`VariationalGPXModel`) against exact GPX and dense references (float64).

Model: ``y_i ~ p(y_i | f_i)``, ``f_i = w_iᵀ z_i``, ``w_i = g(x_i) + ε_w``, ``g_l ~ GP(0, k)`` independent, with
whitened inducing values ``u_l = L_l v_l`` and ``q(v) = N(m, S)`` over all ``d·M`` values (index ``l * M + j``).

* With inducing points at the training inputs and ``q`` the exact posterior of the whitened ``g(X)`` (derived here
  by dense Bayesian linear regression), the tight ELBO equals the exact GPX log marginal likelihood, the weight
  posteriors and the latent predictive equal :class:`GPXModel`'s, and one natural-gradient step reaches that ``q``.
* Any other ``q`` (random, or after training hyperparameters and inducing points) gives ELBO ≤ MLL.
* ``q(f)`` is the ``z``-mixture of ``q(w)``; per-latent and shared inducing points, and joint and independent
  ``q``, agree where they describe the same distribution.
* Minibatch training, GPX classification (Bernoulli) and a generic likelihood run end to end; bad inputs raise.
"""

from __future__ import annotations

import math

import gpytorch
import pytest
import torch
from gpytorch.likelihoods import BernoulliLikelihood, GaussianLikelihood, StudentTLikelihood
from gpytorch.mlls import ExactMarginalLogLikelihood, VariationalELBO

from gpytorch_explain import GPXExplanation, GPXModel
from gpytorch_explain.models.variational_gpx import (
    GPXVariationalELBO,
    VariationalGPXModel,
    _nested_gauss_hermite,
    gpx_expected_log_prob,
)

DTYPE = torch.float64
N, D, DZ = 30, 2, 3
JITTER = 1e-9


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small dense problems: one BLAS thread is much faster than several on a shared, loaded CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def close(actual, expected, tol, what=""):
    actual, expected = torch.as_tensor(actual).detach(), torch.as_tensor(expected).detach()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-300)).item()
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"


def make_data(seed=0, n=N, separate_z=True):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, D, generator=gen, dtype=DTYPE) * 4 - 2
    z = torch.randn(n, DZ, generator=gen, dtype=DTYPE) if separate_z else x
    y = (z[:, 0] * torch.sin(x[:, 0]) + z[:, -1] * x[:, 1] + 0.1 * torch.randn(n, generator=gen, dtype=DTYPE)).to(DTYPE)
    return x, z, y


def set_hypers(model, outputscale=1.3, lengthscale=0.9, weight_noise=0.05, noise=0.02):
    model.base_kernel.outputscale = outputscale
    model.base_kernel.base_kernel.lengthscale = lengthscale
    model.weight_noise = weight_noise
    model.likelihood.noise = noise


def exact_log_marginal(vmodel, x, z, y):
    """log N(y | 0, K ⊙ ZZᵀ + diag(σw²‖z_i‖² + σy²)), dense, with the variational model's hyperparameters."""
    with torch.no_grad():
        k = vmodel.base_kernel(x).to_dense()
        lam = vmodel.weight_noise * z.square().sum(-1) + vmodel.likelihood.noise
        cov = k * (z @ z.T) + torch.diag(lam)
        return torch.distributions.MultivariateNormal(torch.zeros_like(y), cov).log_prob(y)


def optimal_q(vmodel, x, z, y):
    """The exact posterior of the whitened v when U = X: Bayesian linear regression y = W v + e, e ~ N(0, Λ)."""
    with torch.no_grad():
        k = vmodel.base_kernel(x).to_dense()
        chol = torch.linalg.cholesky(k + JITTER * torch.eye(len(x), dtype=DTYPE))
        a = torch.linalg.solve_triangular(chol, k, upper=False).T  # K L^{-T}
        w = (z.T.unsqueeze(-1) * a).permute(1, 0, 2).reshape(len(x), -1)  # W[i, l*n + j] = z_il A[i, j]
        lam = vmodel.weight_noise * z.square().sum(-1) + vmodel.likelihood.noise
        prec = torch.eye(w.size(1), dtype=DTYPE) + w.T @ (w / lam.unsqueeze(-1))
        cov = torch.cholesky_inverse(torch.linalg.cholesky(prec))
        return cov @ (w.T @ (y / lam)), cov


def set_q(vmodel, mean, cov):
    dist = vmodel.variational_strategy._variational_distribution
    with torch.no_grad():
        dist.variational_mean.copy_(mean.reshape(dist.variational_mean.shape))
        dist.chol_variational_covar.copy_(torch.linalg.cholesky(cov))
    vmodel.variational_strategy.variational_params_initialized.fill_(1)


def paired_models(separate_z=True, weight_noise=0.05):
    x, z, y = make_data(separate_z=separate_z)
    exact = GPXModel(x, y, z if separate_z else None)
    vmodel = VariationalGPXModel(
        x, z_dims=DZ if separate_z else None, learn_inducing_locations=False, jitter_val=JITTER
    )
    set_hypers(exact, weight_noise=weight_noise)
    set_hypers(vmodel, weight_noise=weight_noise)
    return exact, vmodel, x, z, y


def elbo(vmodel, x, z, y, cls=GPXVariationalELBO):
    vmodel.train()
    vmodel.likelihood.train()
    out = vmodel(x, z if vmodel.z_dims else None)
    return cls(vmodel.likelihood, vmodel, num_data=len(y))(out, y) * len(y)


# ============================================================================ (1) exactness at the optimum
@pytest.mark.parametrize("separate_z", [True, False])
def test_optimal_q_elbo_equals_exact_mll_and_weights_agree(separate_z):
    exact, vmodel, x, z, y = paired_models(separate_z)
    mean, cov = optimal_q(vmodel, x, z, y)
    set_q(vmodel, mean, cov)

    exact.train()
    exact.likelihood.train()
    mll = ExactMarginalLogLikelihood(exact.likelihood, exact)(exact(x, z if separate_z else None), y) * N
    close(mll, exact_log_marginal(vmodel, x, z, y), 1e-10, "reference MLL")
    tight = elbo(vmodel, x, z, y)
    assert abs(tight.item() - mll.item()) < 1e-6 * abs(mll.item()), (tight.item(), mll.item())

    # GPyTorch's plain ELBO (weight noise inside q(f)) is a strictly looser bound when σw² > 0
    plain = elbo(vmodel, x, z, y, VariationalELBO)
    assert plain.item() < tight.item() - 1e-3

    # any other q is worse
    gen = torch.Generator().manual_seed(1)
    for scale in (1e-2, 1e-1):
        set_q(vmodel, mean + scale * torch.randn(mean.shape, generator=gen, dtype=DTYPE), cov * (1 + scale))
        assert elbo(vmodel, x, z, y).item() < tight.item()
    set_q(vmodel, mean, cov)

    exact.eval()
    vmodel.eval()
    xs = torch.rand(7, D, generator=gen, dtype=DTYPE) * 4 - 2
    zs = torch.randn(7, DZ, generator=gen, dtype=DTYPE) if separate_z else xs
    ew, vw = exact.predict_weights(xs), vmodel.predict_weights(xs)
    close(vw.mean, ew.mean, 1e-6, "weights mean")
    close(vw.covariance_matrix, ew.covariance_matrix, 1e-6, "weights covariance")
    close(vw.variance, ew.variance, 1e-6, "weights variance")
    zarg = zs if separate_z else None
    ef, vf = exact(xs, zarg), vmodel(xs, zarg)
    close(vf.mean, ef.mean, 1e-6, "latent mean")
    close(vf.covariance_matrix, ef.covariance_matrix, 1e-6, "latent covariance")
    ee, ve = exact.explain(xs, zarg), vmodel.explain(xs, zarg)
    assert isinstance(ve, GPXExplanation)
    for name in ("prediction_mean", "prediction_std", "latent_std", "weights_mean", "weights_covariance"):
        close(getattr(ve, name), getattr(ee, name), 1e-6, name)


def test_plain_elbo_is_tight_without_weight_noise():
    _, vmodel, x, z, y = paired_models(weight_noise=1e-10)
    set_q(vmodel, *optimal_q(vmodel, x, z, y))
    ref = exact_log_marginal(vmodel, x, z, y)
    for cls in (GPXVariationalELBO, VariationalELBO):
        assert abs(elbo(vmodel, x, z, y, cls).item() - ref.item()) < 1e-6 * abs(ref.item())


def test_one_natural_gradient_step_reaches_the_optimum():
    x, z, y = make_data()
    vmodel = VariationalGPXModel(
        x, z_dims=DZ, variational_distribution="natural", learn_inducing_locations=False, jitter_val=JITTER
    )
    set_hypers(vmodel)
    # lr = 0 freezes the hyperparameters; one full-batch NGD step of size 1 is exact for a conjugate model
    vmodel.fit(x, y, z, num_epochs=1, batch_size=N, shuffle=False, lr=0.0, ngd_lr=1.0)
    ref = exact_log_marginal(vmodel, x, z, y)
    assert abs(elbo(vmodel, x, z, y).item() - ref.item()) < 1e-6 * abs(ref.item())


# ============================================================================ (2) bound
@pytest.mark.parametrize("kind", ["cholesky", "independent", "meanfield"])
def test_elbo_below_mll_for_random_q(kind):
    x, z, y = make_data(seed=3)
    gen = torch.Generator().manual_seed(4)
    vmodel = VariationalGPXModel(x[:8], z_dims=DZ, variational_distribution=kind)
    set_hypers(vmodel)
    ref = exact_log_marginal(vmodel, x, z, y).item()
    dist = vmodel.variational_strategy._variational_distribution
    vmodel.variational_strategy.variational_params_initialized.fill_(1)
    for _ in range(3):
        with torch.no_grad():
            for p in dist.parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=DTYPE) * 0.5)
        for cls in (GPXVariationalELBO, VariationalELBO):
            assert elbo(vmodel, x, z, y, cls).item() <= ref


def test_elbo_below_mll_during_training():
    x, z, y = make_data(seed=5, n=40)
    vmodel = VariationalGPXModel(x[::4].clone(), z_dims=DZ)  # 10 learnable inducing points
    vmodel.fit(x, y, z, num_epochs=0)  # nothing happens, still valid
    opt = torch.optim.Adam(vmodel.parameters(), lr=0.05)
    mll = GPXVariationalELBO(vmodel.likelihood, vmodel, num_data=40)
    vmodel.train()
    losses = []
    for step in range(40):
        opt.zero_grad()
        loss = -mll(vmodel(x, z), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 10 == 9:
            assert elbo(vmodel, x, z, y).item() <= exact_log_marginal(vmodel, x, z, y).item() + 1e-8
    assert losses[-1] < losses[0]


# ============================================================================ consistency
def test_latent_is_the_z_mixture_of_the_weights_and_lazy_matches_dense():
    x, z, y = make_data(seed=6)
    vmodel = VariationalGPXModel(x[:9], z_dims=DZ)
    set_hypers(vmodel)
    vmodel.variational_strategy.variational_params_initialized.fill_(1)
    gen = torch.Generator().manual_seed(7)
    dist = vmodel.variational_strategy._variational_distribution
    with torch.no_grad():
        for p in dist.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=DTYPE) * 0.3)
    vmodel.eval()
    xs, zs = x[:6], z[:6]
    w = vmodel.predict_weights(xs)
    f = vmodel(xs, zs)
    zbar = torch.block_diag(*zs.unsqueeze(1))  # (m, m*d): f = Z̄ vec_interleaved(w)
    close(f.mean, (w.mean * zs).sum(-1), 1e-12, "latent mean")
    close(f.covariance_matrix, zbar @ w.covariance_matrix @ zbar.T, 1e-10, "latent covariance")
    close(f.variance, f.covariance_matrix.diagonal(), 1e-12, "lazy variance")
    mean, blocks = vmodel.weight_blocks(xs)
    dense = w.covariance_matrix
    close(blocks, torch.stack([dense[3 * p : 3 * p + 3, 3 * p : 3 * p + 3] for p in range(6)]), 1e-12, "blocks")
    close(mean, w.mean, 1e-14, "blocks mean")
    # the joint weight covariance has cross-feature correlation under a joint q
    assert blocks[:, 0, 1].abs().max() > 1e-3


def test_independent_q_and_per_latent_inducing_points_agree_with_joint_shared():
    x, z, y = make_data(seed=8)
    u = x[:7].clone()
    joint = VariationalGPXModel(u, z_dims=DZ)
    indep = VariationalGPXModel(u.expand(DZ, *u.shape).clone(), z_dims=DZ, variational_distribution="independent")
    for model in (joint, indep):
        set_hypers(model)
        model.variational_strategy.variational_params_initialized.fill_(1)
    gen = torch.Generator().manual_seed(9)
    mean = torch.randn(DZ, 7, generator=gen, dtype=DTYPE)
    chol = torch.randn(DZ, 7, 7, generator=gen, dtype=DTYPE).tril()
    idist = indep.variational_strategy._variational_distribution
    with torch.no_grad():
        idist.variational_mean.copy_(mean)
        idist.chol_variational_covar.copy_(chol)
    set_q(joint, mean.reshape(-1), torch.block_diag(*(chol @ chol.mT)))
    close(elbo(indep, x, z, y), elbo(joint, x, z, y), 1e-8, "ELBO")
    joint.eval()
    indep.eval()
    close(indep(x, z).covariance_matrix, joint(x, z).covariance_matrix, 1e-8, "q(f)")
    close(indep.predict_weights(x[:4]).covariance_matrix, joint.predict_weights(x[:4]).covariance_matrix, 1e-8, "w")
    close(indep.weight_blocks(x[:4])[1], joint.weight_blocks(x[:4])[1], 1e-8, "blocks")


def test_prior_mode_is_the_gpx_prior():
    x, z, _ = make_data()
    vmodel = VariationalGPXModel(x[:5], z_dims=DZ)
    prior = vmodel(x, z, prior=True)
    ref = vmodel.base_kernel(x).to_dense() * (z @ z.T) + torch.diag(vmodel.weight_noise * z.square().sum(-1))
    close(prior.covariance_matrix, ref, 1e-12, "prior")


# ============================================================================ likelihood terms
def test_expected_log_prob_closed_forms_match_quadrature():
    gen = torch.Generator().manual_seed(10)
    mean = torch.randn(12, generator=gen, dtype=DTYPE)
    var = torch.rand(12, generator=gen, dtype=DTYPE) * 0.5
    s = torch.rand(12, generator=gen, dtype=DTYPE) * 0.3
    gauss = GaussianLikelihood().double()
    gauss.noise = 0.2
    y = torch.randn(12, generator=gen, dtype=DTYPE)
    close(
        _nested_gauss_hermite(gauss, y, mean, var, s, 30),
        gpx_expected_log_prob(gauss, y, mean, var, s),
        1e-8,
        "gaussian",
    )
    bern = BernoulliLikelihood().double()  # float64 quadrature nodes
    labels = (torch.rand(12, generator=gen, dtype=DTYPE) > 0.5).to(DTYPE)
    closed = gpx_expected_log_prob(bern, labels, mean, var, s)
    close(_nested_gauss_hermite(bern, labels, mean, var, s, 40), closed, 1e-8, "bernoulli")
    # Jensen: marginalising ε_w inside the log is a tighter bound than GPyTorch's expectation outside it
    loose = bern.expected_log_prob(labels, gpytorch.distributions.MultivariateNormal(mean, torch.diag(var + s)))
    assert torch.all(closed >= loose - 1e-10)


# ============================================================================ (3) minibatch regression
def test_minibatch_training_matches_exact_gpx():
    gen = torch.Generator().manual_seed(11)
    n = 1200
    x = torch.rand(n, 3, generator=gen, dtype=DTYPE) * 4 - 2
    f = x[:, 0] * torch.sin(x[:, 1]) + 0.5 * x[:, 2] * torch.cos(x[:, 0])
    y = f + 0.1 * torch.randn(n, generator=gen, dtype=DTYPE)
    xt = torch.rand(200, 3, generator=gen, dtype=DTYPE) * 4 - 2
    ft = xt[:, 0] * torch.sin(xt[:, 1]) + 0.5 * xt[:, 2] * torch.cos(xt[:, 0])

    vmodel = VariationalGPXModel(x[torch.randperm(n, generator=gen)[:30]].clone())
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=200, shuffle=True, generator=gen
    )
    vmodel.fit(loader, num_epochs=10, lr=0.05)
    hist = vmodel.fit_history
    assert len(hist) == 10 and hist[-1] < hist[0] - 0.5, hist

    exact = GPXModel(x[:300], y[:300]).fit(max_iter=30)
    with torch.no_grad():
        vm, em = vmodel(xt).mean, exact(xt).mean
        vw, ew = vmodel.predict_weights(xt).mean, exact.predict_weights(xt).mean
    corr = torch.corrcoef(torch.stack([vm, em]))[0, 1]
    assert corr > 0.95, corr
    assert (vm - ft).square().mean().sqrt() < 0.35
    # local weights are not identifiable feature by feature; jointly they agree closely
    assert torch.corrcoef(torch.stack([vw.flatten(), ew.flatten()]))[0, 1] > 0.9
    expl = vmodel.explain(xt[:5])
    close(expl.contributions_mean.sum(-1), vm[:5], 1e-10, "contributions sum to the prediction")


# ============================================================================ (4) classification and others
def test_bernoulli_classification_end_to_end():
    gen = torch.Generator().manual_seed(12)
    n = 600
    x = torch.randn(n, 2, generator=gen, dtype=DTYPE)
    labels = (x[:, 0] * (1 + x[:, 1]) > 0).to(DTYPE)
    vmodel = VariationalGPXModel(
        x[:20].clone(), likelihood=BernoulliLikelihood(), feature_names=["a", "b"], weight_noise=0.05
    )
    vmodel.fit(x, labels, num_epochs=15, batch_size=200, lr=0.05, generator=gen)
    assert vmodel.fit_history[-1] < vmodel.fit_history[0]
    with torch.no_grad():
        prob = vmodel.likelihood(vmodel(x)).mean
    assert ((prob > 0.5).to(DTYPE) == labels).to(DTYPE).mean() > 0.85
    weights = vmodel.predict_weights(x[:4])
    assert weights.mean.shape == (4, 2) and weights.covariance_matrix.shape == (8, 8)
    assert torch.all(weights.variance > 0)
    expl = vmodel.explain(x[:4])
    assert torch.all((expl.prediction_mean > 0) & (expl.prediction_mean < 1))
    close(expl.prediction_std, (expl.prediction_mean * (1 - expl.prediction_mean)).sqrt(), 1e-12, "Bernoulli std")
    assert "a" in expl.summary(0)
    # the plain GPyTorch ELBO also works with a Bernoulli likelihood
    vmodel.train()
    assert torch.isfinite(VariationalELBO(vmodel.likelihood, vmodel, n)(vmodel(x), labels))


def test_generic_likelihood_and_ngd_fit_run():
    x, z, y = make_data(seed=13, n=60)
    vmodel = VariationalGPXModel(x[:6], z_dims=DZ, likelihood=StudentTLikelihood(), variational_distribution="natural")
    vmodel.fit(x, y, z, num_epochs=3, batch_size=20, lr=0.01, ngd_lr=0.1)
    assert all(math.isfinite(v) for v in vmodel.fit_history)
    expl = vmodel.explain(x[:3], z[:3])
    assert expl.prediction_mean.shape == (3,) and torch.all(torch.isfinite(expl.prediction_std))


# ============================================================================ (5) bad inputs
def test_bad_inputs():
    x, z, y = make_data()
    with pytest.raises(TypeError, match="inducing_points must be a torch.Tensor"):
        VariationalGPXModel(x.tolist())
    with pytest.raises(ValueError, match="NaN"):
        VariationalGPXModel(torch.full((3, 2), float("nan"), dtype=DTYPE))
    with pytest.raises(TypeError, match="floating-point"):
        VariationalGPXModel(torch.ones(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(d, M, D\) with d = 3"):
        VariationalGPXModel(torch.randn(2, 4, D, dtype=DTYPE), z_dims=DZ)
    with pytest.raises(ValueError, match="z_dims"):
        VariationalGPXModel(x[:4], z_dims=0)
    with pytest.raises(ValueError, match="variational_distribution must be one of"):
        VariationalGPXModel(x[:4], variational_distribution="delta")
    with pytest.raises(ValueError, match="must have shape"):
        VariationalGPXModel(x[:4], variational_distribution=gpytorch.variational.CholeskyVariationalDistribution(4))
    with pytest.raises(ValueError, match="no batch shape"):
        VariationalGPXModel(x[:4], base_kernel=gpytorch.kernels.RBFKernel(batch_shape=torch.Size([2])))
    with pytest.raises(TypeError, match="multitask"):
        VariationalGPXModel(x[:4], likelihood=gpytorch.likelihoods.MultitaskGaussianLikelihood(2))
    with pytest.raises(ValueError, match="feature_names has 1 names"):
        VariationalGPXModel(x[:4], feature_names=["a"])

    vmodel = VariationalGPXModel(x[:4], z_dims=DZ)
    with pytest.raises(ValueError, match="call model\\(x, z\\)"):
        vmodel(x)
    with pytest.raises(ValueError, match="must have 3 columns"):
        vmodel(x, z[:, :2])
    with pytest.raises(ValueError, match="Mismatched number of samples"):
        vmodel(x, z[:5])
    with pytest.raises(TypeError, match="dtype"):
        vmodel(x.float(), z.float())
    with pytest.raises(ValueError, match="NaN"):
        vmodel(x, torch.full_like(z, float("nan")))
    with pytest.raises(ValueError, match="must have 2 columns"):
        vmodel.predict_weights(z)
    with pytest.raises(ValueError, match="pass z"):
        vmodel.explain(x)
    with pytest.raises(ValueError, match="needs train_y"):
        vmodel.fit(x)
    with pytest.raises(ValueError, match="objective"):
        vmodel.fit(x, y, z, objective="pll")
    with pytest.raises(ValueError, match="Mismatched"):
        vmodel.fit(x, y[:5], z)
    assert vmodel(torch.cat([x, z], -1)).mean.shape == (N,)  # joined rows are accepted

    plain = VariationalGPXModel(x[:4])
    with pytest.raises(ValueError, match="do not pass z"):
        plain(x, z)
    with pytest.raises(ValueError, match="do not pass z"):
        plain.explain(x, z)
