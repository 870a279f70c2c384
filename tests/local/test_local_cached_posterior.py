"""CachedPosteriorModel: the exact GP posterior, checked against dense formulas and against GPyTorch's own path."""

import numpy as np
import pytest
import torch
from botorch.acquisition.analytic import PosteriorStandardDeviation
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize
from gpytorch.kernels import MaternKernel

from gpytorch_explain.local.acquisition import make_acquisition
from gpytorch_explain.local.cached_posterior import CachedPosteriorModel
from gpytorch_explain.local.surrogate import (
    fit_surrogate,
    make_relevance_surrogate,
    make_surrogate,
    make_trend_surrogate,
)

DT = torch.float64


def _samples(n=25, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    U = torch.rand(n, d, generator=g, dtype=DT) * 2 - 1
    y = torch.sin(2 * U[:, 0]) + U[:, 1] * U[:, 2] - 0.5 * U[:, 3]
    return U, (y - y.mean()) / y.std()


def _dense_posterior(U, y, Z, ell, scale, const, noise):
    """Rasmussen & Williams eq. (2.23)-(2.24) with an explicit numpy RBF kernel."""
    U, y, Z = (a.detach().numpy() for a in (U, y, Z))

    def k(A, B):
        return scale * np.exp(-0.5 * (((A[:, None, :] - B[None, :, :]) / ell) ** 2).sum(-1))

    C = k(U, U) + noise * np.eye(len(U))
    Kzu = k(Z, U)
    mean = const + Kzu @ np.linalg.solve(C, y - const)
    cov = k(Z, Z) - Kzu @ np.linalg.solve(C, Kzu.T)
    return mean, cov


@pytest.mark.parametrize("which", ["rbf", "scaled_rbf"])
def test_matches_the_dense_formulas(which):
    U, y = _samples()
    model = make_surrogate(U, y) if which == "rbf" else make_relevance_surrogate(make_surrogate(U, y))
    fit_surrogate(model, maxiter=50)
    model.eval()
    kernel = model.covar_module
    scale = float(kernel.outputscale) if which == "scaled_rbf" else 1.0
    ell = getattr(kernel, "base_kernel", kernel).lengthscale.detach().numpy().reshape(-1)
    const = float(model.mean_module.constant.detach())
    noise = float(model.likelihood.noise)
    fast = CachedPosteriorModel(model)
    Z = torch.rand(6, 4, dtype=DT, generator=torch.Generator().manual_seed(1)) * 2 - 1
    mean, cov = _dense_posterior(U, y, Z, ell, scale, const, noise)
    # q = 1 with a batch of 6 (the acquisitions' case): the marginals
    post = fast.posterior(Z.unsqueeze(-2))
    np.testing.assert_allclose(post.mean.detach().numpy().reshape(-1), mean, atol=1e-9)
    np.testing.assert_allclose(post.variance.detach().numpy().reshape(-1), np.diag(cov), atol=1e-9)
    # one joint batch of q = 6 points: the full covariance, and the observation noise on its diagonal
    joint = fast.posterior(Z, observation_noise=True)
    np.testing.assert_allclose(joint.mean.detach().numpy().reshape(-1), mean, atol=1e-9)
    np.testing.assert_allclose(joint.mvn.covariance_matrix.detach().numpy(), cov + noise * np.eye(6), atol=1e-9)
    noisy = fast.posterior(Z.unsqueeze(-2), observation_noise=True)
    np.testing.assert_allclose(noisy.variance.detach().numpy().reshape(-1), np.diag(cov) + noise, atol=1e-9)


@pytest.mark.parametrize("which", ["trend", "matern"])
def test_other_kernels_take_gpytorchs_kernel_and_agree_with_its_posterior(which):
    U, y = _samples(seed=2)
    if which == "trend":
        model = make_trend_surrogate(make_surrogate(U, y))
    else:
        kernel = MaternKernel(ard_num_dims=4).to(DT)
        model = SingleTaskGP(U, y.unsqueeze(-1), covar_module=kernel, outcome_transform=None)
    fit_surrogate(model, maxiter=30)
    model.eval()
    fast = CachedPosteriorModel(model)
    assert fast._rbf is None
    Z = torch.rand(3, 2, 4, dtype=DT) * 2 - 1
    for q_shape in (Z, Z[:, :1]):
        ref, got = model.posterior(q_shape), fast.posterior(q_shape)
        torch.testing.assert_close(got.mean, ref.mean, atol=1e-9, rtol=0)
        torch.testing.assert_close(got.variance, ref.variance, atol=1e-9, rtol=0)


def test_acquisition_values_and_gradients_match_the_uncached_model():
    U, y = _samples(n=30, d=5, seed=3)
    model = make_surrogate(U, (y - y.mean()) / y.std())
    fit_surrogate(model, maxiter=50)
    model.eval()
    bounds = torch.stack([-torch.ones(5, dtype=DT), torch.ones(5, dtype=DT)])
    X = (torch.rand(7, 1, 5, dtype=DT) * 2 - 1).requires_grad_(True)
    for name in ("lcb", "ei", "pi", "variance"):
        fast = make_acquisition(name, model, torch.zeros(5, dtype=DT), bounds)
        slow = make_acquisition(name, model, torch.zeros(5, dtype=DT), bounds, cached=False)
        assert isinstance(fast.model, CachedPosteriorModel) and not isinstance(slow.model, CachedPosteriorModel)
        a, b = fast(X), slow(X)
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)
        (ga,) = torch.autograd.grad(a.sum(), X)
        (gb,) = torch.autograd.grad(b.sum(), X)
        torch.testing.assert_close(ga, gb, atol=1e-8, rtol=1e-8)


@pytest.mark.filterwarnings("ignore::botorch.exceptions.warnings.InputDataWarning")
def test_models_it_cannot_cache_are_refused_and_acquisitions_fall_back():
    U, y = _samples()
    with_transform = SingleTaskGP(U, y.unsqueeze(-1), input_transform=Normalize(d=4), outcome_transform=None).eval()
    with pytest.raises(ValueError, match="transforms"):
        CachedPosteriorModel(with_transform)
    batched = SingleTaskGP(U.expand(2, -1, -1), y.expand(2, -1).unsqueeze(-1), outcome_transform=None).eval()
    with pytest.raises(ValueError, match="non-batched"):
        CachedPosteriorModel(batched)
    bounds = torch.stack([-torch.ones(4, dtype=DT), torch.ones(4, dtype=DT)])
    acq = make_acquisition("variance", with_transform, torch.zeros(4, dtype=DT), bounds)
    assert acq.model is with_transform
    ref = PosteriorStandardDeviation(with_transform)
    Z = torch.rand(3, 1, 4, dtype=DT)
    torch.testing.assert_close(acq(Z), ref(Z))


@pytest.mark.filterwarnings("ignore::botorch.exceptions.warnings.InputDataWarning")
def test_a_singular_training_covariance_gets_gpytorchs_jitter():
    from gpytorch.constraints import GreaterThan
    from gpytorch.likelihoods import GaussianLikelihood
    from gpytorch.utils.warnings import NumericalWarning

    U, _ = _samples(n=10, d=4, seed=4)
    U = torch.cat([U, U[:3]])  # repeated rows and no noise: K + 0 I is singular
    lik = GaussianLikelihood(noise_constraint=GreaterThan(0.0, transform=None)).to(DT)
    model = SingleTaskGP(U, U.sum(-1, keepdim=True), likelihood=lik, outcome_transform=None)
    model.likelihood.noise = 0.0
    model.eval()
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky(model.covar_module(U).to_dense())
    with pytest.warns(NumericalWarning, match="jitter"):
        fast = CachedPosteriorModel(model)
    Z = torch.rand(5, 1, 4, dtype=DT, generator=torch.Generator().manual_seed(5)) * 2 - 1
    ref, got = model.posterior(Z), fast.posterior(Z)
    torch.testing.assert_close(got.mean, ref.mean, atol=1e-8, rtol=0)
    torch.testing.assert_close(got.variance, ref.variance, atol=1e-8, rtol=0)
