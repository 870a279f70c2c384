#!/usr/bin/env python3
"""kl_relevance against a dense brute-force GP posterior and against its Δ → 0 limit (autograd)."""

import math

import gpytorch
import pytest
import torch

from gpytorch_explain.attribution.kl_relevance import gaussian_kl, kl_relevance


class _GP(gpytorch.models.ExactGP):
    def __init__(self, x, y):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=x.size(-1)))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _model():
    torch.manual_seed(0)
    x = torch.rand(25, 3, dtype=torch.float64) * 2 - 1
    y = torch.sin(2 * x[:, 0]) + x[:, 1] ** 2
    model = _GP(x, y).double()
    model.covar_module.base_kernel.lengthscale = torch.tensor([[0.7, 1.3, 2.5]], dtype=torch.float64)
    model.covar_module.outputscale = 1.5
    model.likelihood.noise = 0.05
    return model.eval(), x, y


def _dense_posterior(model, X, y, t, noise: bool):
    """Posterior mean and variance at the rows of t from dense matrices (no GPyTorch prediction code)."""
    ls = model.covar_module.base_kernel.lengthscale.detach().reshape(-1)
    s2 = model.covar_module.outputscale.detach()
    n2 = model.likelihood.noise.detach().reshape(())

    def k(a, b):
        d = (a[:, None, :] - b[None, :, :]) / ls
        return s2 * torch.exp(-0.5 * (d**2).sum(-1))

    C = k(X, X) + n2 * torch.eye(len(X), dtype=X.dtype)
    ks = k(t, X)
    mean = ks @ torch.linalg.solve(C, y)
    var = s2 - (ks * torch.linalg.solve(C, ks.T).T).sum(1)
    return mean, var + (n2 if noise else 0.0)


@pytest.mark.parametrize("noise", [True, False])
def test_kl_relevance_matches_dense_brute_force(noise):
    model, X, y = _model()
    xs = torch.tensor([[0.1, -0.2, 0.3], [0.8, 0.5, -0.9]], dtype=torch.float64)
    delta = 1e-2
    got = kl_relevance(model, xs, delta=delta, observation_noise=noise)
    for i in range(2):
        mu1, v1 = _dense_posterior(model, X, y, xs[i : i + 1], noise)
        for j in range(3):
            xp = xs[i : i + 1].clone()
            xp[0, j] += delta
            mu2, v2 = _dense_posterior(model, X, y, xp, noise)
            kl = 0.5 * math.log(v2 / v1) + (v1 + (mu1 - mu2) ** 2) / (2 * v2) - 0.5
            assert got[i, j].item() == pytest.approx(math.sqrt(2 * kl.item()) / delta, rel=1e-6)


def test_kl_relevance_small_delta_limit():
    model, X, y = _model()
    xs = torch.tensor([[0.1, -0.2, 0.3], [-0.5, 0.5, 0.0]], dtype=torch.float64)
    got = kl_relevance(model, xs, delta=1e-5, observation_noise=True)
    for i in range(2):
        t = xs[i : i + 1].clone().requires_grad_(True)
        post = model.likelihood(model(t))
        (gmu,) = torch.autograd.grad(post.mean.sum(), t, retain_graph=True)
        sd = post.variance.sqrt()
        (gsd,) = torch.autograd.grad(sd.sum(), t)
        limit = (gmu**2 + 2 * gsd**2).sqrt() / sd.detach()
        torch.testing.assert_close(got[i], limit[0].detach(), rtol=1e-3, atol=1e-8)


def test_gaussian_kl_values_and_errors():
    # KL(N(0,1) || N(0,4)) = log 2 + 1/8 - 1/2
    val = gaussian_kl(torch.tensor(0.0), torch.tensor(1.0), torch.tensor(0.0), torch.tensor(4.0))
    assert val.item() == pytest.approx(math.log(2) + 0.125 - 0.5)
    model, X, _ = _model()
    with pytest.raises(ValueError, match="delta"):
        kl_relevance(model, X[:2], delta=0.0)
    model.train()
    with pytest.raises(ValueError, match="eval mode"):
        kl_relevance(model, X[:2])


def test_botorch_models_are_read_through_their_posterior():
    # model(x) in eval mode skips BoTorch's input transform: the relevances were those of other inputs (relative
    # error 1.0). Reference: the definition on model.posterior(x, observation_noise=True), Δ = 1e-3.
    from botorch.models import SingleTaskGP
    from botorch.models.transforms import Normalize, Standardize

    gen = torch.Generator().manual_seed(2)
    U = torch.rand(25, 3, generator=gen, dtype=torch.float64)
    X = U * torch.tensor([3.0, 0.5, 2.0], dtype=torch.float64) + torch.tensor([1.0, -0.2, 0.5], dtype=torch.float64)
    Y = (torch.sin(4 * U).sum(-1) + U[:, 0] ** 2).unsqueeze(-1)
    model = SingleTaskGP(X, Y, input_transform=Normalize(3), outcome_transform=Standardize(1))
    model.covar_module.lengthscale = 0.3
    model.likelihood.noise = 0.01
    model.eval()
    x, delta = X[:4] + 0.01, 1e-3
    for noise in (True, False):
        with torch.no_grad():
            lib = kl_relevance(model, x, delta=delta, observation_noise=noise)
            p0 = model.posterior(x, observation_noise=noise)
            ref = torch.empty_like(lib)
            for j in range(3):
                p = model.posterior(x + delta * torch.eye(3, dtype=torch.float64)[j], observation_noise=noise)
                kl = gaussian_kl(p0.mean[:, 0], p0.variance[:, 0], p.mean[:, 0], p.variance[:, 0])
                ref[:, j] = (2 * kl).sqrt() / delta
        torch.testing.assert_close(lib, ref, rtol=1e-9, atol=0)


def test_batched_models_are_refused():
    x = torch.rand(2, 10, 3, dtype=torch.float64)
    model = _GP(x, x[..., 0]).double()
    model.likelihood = gpytorch.likelihoods.GaussianLikelihood(batch_shape=torch.Size([2])).double()
    with pytest.raises(ValueError, match="one output of an unbatched model"):
        kl_relevance(model.eval(), x[0, :3])


def test_botorch_fixed_noise_models_take_observation_noise():
    from botorch.models import SingleTaskGP

    gen = torch.Generator().manual_seed(3)
    X = torch.rand(15, 2, generator=gen, dtype=torch.float64)
    Y = torch.sin(3 * X).sum(-1, keepdim=True)
    model = SingleTaskGP(X, Y, train_Yvar=torch.full_like(Y, 0.01)).eval()
    x = X[:3] + 0.01
    with torch.no_grad():
        lib = kl_relevance(model, x)
        p0 = model.posterior(x, observation_noise=True)
        ref = torch.empty_like(lib)
        for j in range(2):
            p = model.posterior(x + 1e-3 * torch.eye(2, dtype=torch.float64)[j], observation_noise=True)
            ref[:, j] = (
                2 * gaussian_kl(p0.mean[:, 0], p0.variance[:, 0], p.mean[:, 0], p.variance[:, 0])
            ).sqrt() / 1e-3
    torch.testing.assert_close(lib, ref, rtol=1e-9, atol=0)
