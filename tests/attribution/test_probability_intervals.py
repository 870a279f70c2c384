"""Class-probability attributions with credible intervals against independent Monte Carlo (float64).

Reference: draws of the latent f only, jointly at x (or at every node of a 48-node Gauss-Legendre path) and at
x ± h e_i, from the model's own predictive ``model(points)`` (unwhitened strategy: no jitter in it); ∂_i f by the
central difference of each draw, ∂p = σ'(f) ∂f (softmax: p_c (∂f_c - Σ_k p_k ∂f_k)), IG by quadrature. The library
draws (f, ∇f) from their exact joint Gaussian instead. Tolerance: means, stds and the 5 % / 50 % / 95 % quantiles
agree within 4.5 combined Monte Carlo standard errors (estimated from the draws: the attributions are heavy-tailed,
so the standard errors of stds and quantiles come from fourth moments and local densities, not a fixed fraction).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.kernels import RBFKernel, ScaleKernel
from gpytorch.likelihoods import BernoulliLikelihood, SoftmaxLikelihood
from gpytorch.means import LinearMean
from gpytorch.models import ApproximateGP
from gpytorch.variational import (
    CholeskyVariationalDistribution,
    IndependentMultitaskVariationalStrategy,
    UnwhitenedVariationalStrategy,
)

from gpytorch_explain.attribution.classification import expected_probability_gradient, expected_probability_ig
from gpytorch_explain.attribution.probability_intervals import (
    probability_gradient_distribution,
    probability_ig_distribution,
)

DTYPE = torch.float64
D, U, C = 2, 7, 3
S = 20_000
H = 1e-3


class SVGP(ApproximateGP):
    def __init__(self, num_classes=None, seed=0):
        gen = torch.Generator().manual_seed(seed)
        batch = torch.Size([num_classes]) if num_classes else torch.Size()
        Z = torch.rand(*batch, U, D, generator=gen, dtype=DTYPE) * 2 - 1
        dist = CholeskyVariationalDistribution(U, batch_shape=batch)
        strategy = UnwhitenedVariationalStrategy(self, Z, dist, learn_inducing_locations=False)
        if num_classes:
            strategy = IndependentMultitaskVariationalStrategy(strategy, num_tasks=num_classes)
        super().__init__(strategy)
        self.mean_module = LinearMean(D, batch_shape=batch)
        self.covar_module = ScaleKernel(RBFKernel(ard_num_dims=D, batch_shape=batch), batch_shape=batch)
        self.to(DTYPE)
        with torch.no_grad():
            self.covar_module.outputscale = torch.full(batch, 2.0, dtype=DTYPE)
            self.covar_module.base_kernel.lengthscale = torch.tensor([0.7, 1.1], dtype=DTYPE)
            self.mean_module.weights.copy_(0.3 * torch.randn(*batch, D, 1, generator=gen, dtype=DTYPE))
            dist.variational_mean.copy_(1.5 * torch.randn(*batch, U, generator=gen, dtype=DTYPE))
            chol = torch.tril(0.3 * torch.randn(*batch, U, U, generator=gen, dtype=DTYPE)) + torch.eye(U, dtype=DTYPE)
            dist.chol_variational_covar.copy_(0.7 * chol)
        base = strategy.base_variational_strategy if num_classes else strategy
        base.variational_params_initialized.fill_(1)

    def forward(self, x):
        return MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _points(m=2, seed=1):
    return torch.rand(m, D, generator=torch.Generator().manual_seed(seed), dtype=DTYPE) * 1.6 - 0.8


def _reference_latents(model, points, seed):
    """S joint draws of f at ``points`` from the model's own predictive, ``(S, P)`` or ``(S, P, C)``."""
    with torch.no_grad():
        out = model(points)
        mean, cov = out.mean, out.covariance_matrix  # multitask: interleaved (P*C)
    evals, evecs = torch.linalg.eigh(0.5 * (cov + cov.mT))
    root = evecs * evals.clamp_min(0).sqrt()
    eps = torch.randn(S, cov.size(-1), generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    draws = eps @ root.mT
    return mean + draws.reshape(S, *mean.shape) if isinstance(out, MultitaskMultivariateNormal) else mean + draws


def _prob_and_grad(kind, f, df):
    """p and ∂p per draw from f (S, [C]) and ∂f (S, [C,] D)."""
    if kind == "bernoulli":
        phi = torch.exp(-0.5 * f * f) / np.sqrt(2 * np.pi)
        return torch.special.ndtr(f), phi.unsqueeze(-1) * df
    p = torch.softmax(f, -1)  # (S, C)
    avg = (p.unsqueeze(-1) * df).sum(-2, keepdim=True)
    return p, p.unsqueeze(-1) * (df - avg)


def _fd_at(model, nodes, seed):
    """f and ∂f at ``nodes`` (N, D) from joint draws at nodes ± h e_i: f (S, N, [C]), ∂f (S, N, [C,] D)."""
    steps = H * torch.eye(D, dtype=DTYPE)
    pts = torch.stack([nodes[:, None] + steps, nodes[:, None] - steps], 2).reshape(-1, D)  # (N, D, 2)
    f = _reference_latents(model, pts, seed)
    f = f.reshape(S, nodes.size(0), D, 2, *f.shape[2:])
    df = (f[:, :, :, 0] - f[:, :, :, 1]) / (2 * H)  # (S, N, D, [C])
    mid = 0.5 * (f[:, :, :, 0] + f[:, :, :, 1]).mean(2)  # f(node) + O(h²)
    return mid, df.movedim(2, -1)


def _std_se(x):
    """Standard error of the sample std: sqrt(Var[(x - mean)²] / S) / (2 std)."""
    dev2 = (x - x.mean(0)).square()
    return (dev2.var(0) / x.size(0)).sqrt() / (2 * x.std(0))


def _quantile_se(x, q, delta=0.01):
    """Standard error of the sample q-quantile: sqrt(q(1-q)/S) / density, the density from nearby quantiles."""
    lo, hi = torch.quantile(x, q - delta, dim=0), torch.quantile(x, q + delta, dim=0)
    return (q * (1 - q) / x.size(0)) ** 0.5 * (hi - lo) / (2 * delta)


def _compare(res, ref, what, z=4.5):
    """Library draws against reference draws: mean, std and 5 % / 50 % / 95 % quantiles within z standard errors."""
    lib = res.samples
    se = (lib.var(0) / lib.size(0) + ref.var(0) / ref.size(0)).sqrt()
    gap = (lib.mean(0) - ref.mean(0)).abs()
    assert (gap <= z * se + 1e-12).all(), f"{what} mean: {(gap / se).max():.2f} SE"
    se = (_std_se(lib) ** 2 + _std_se(ref) ** 2).sqrt()
    gap = (lib.std(0) - ref.std(0)).abs()
    assert (gap <= z * se + 1e-12).all(), f"{what} std: {(gap / se).max():.2f} SE"
    assert (se < 0.05 * ref.std(0)).all()  # the test has power: stds known to better than 5 %
    for q in (0.05, 0.5, 0.95):
        se = (_quantile_se(lib, q) ** 2 + _quantile_se(ref, q) ** 2).sqrt()
        gap = (torch.quantile(lib, q, dim=0) - torch.quantile(ref, q, dim=0)).abs()
        assert (gap <= z * se + 1e-10).all(), f"{what} quantile {q}: {(gap / se).max():.2f} SE"


@pytest.mark.parametrize("kind", ["bernoulli", "softmax"])
def test_gradient_distribution_matches_independent_monte_carlo(kind):
    model = SVGP(C if kind == "softmax" else None).eval()
    lik = BernoulliLikelihood() if kind == "bernoulli" else SoftmaxLikelihood(num_classes=C, mixing_weights=False)
    x = _points()
    res = probability_gradient_distribution(model, lik, x, num_samples=S, level=0.9,
                                            generator=torch.Generator().manual_seed(5))  # fmt: skip
    shape = (x.size(0), D) if kind == "bernoulli" else (x.size(0), C, D)
    assert res.samples.shape == (S, *shape) and res.lower.shape == shape
    torch.testing.assert_close(res.lower, torch.quantile(res.samples, 0.05, dim=0))
    torch.testing.assert_close(res.upper, torch.quantile(res.samples, 0.95, dim=0))
    f, df = _fd_at(model, x, seed=11)
    ref = _prob_and_grad(kind, f, df)[1]  # (S, m, [C,] D)
    _compare(res, ref, f"{kind} gradient")
    # the mean agrees with the library's exact / Rao-Blackwellised expectation
    exp = expected_probability_gradient(model, lik, x, num_samples=S, generator=torch.Generator().manual_seed(3))
    se = res.standard_error if exp.standard_error is None else (res.standard_error**2 + exp.standard_error**2).sqrt()
    assert ((res.mean - exp.mean).abs() <= 4.5 * se).all()


@pytest.mark.parametrize("kind", ["bernoulli", "softmax"])
def test_ig_distribution_matches_independent_monte_carlo(kind):
    model = SVGP(C if kind == "softmax" else None, seed=2).eval()
    lik = BernoulliLikelihood() if kind == "bernoulli" else SoftmaxLikelihood(num_classes=C, mixing_weights=False)
    x = _points(m=1, seed=4)
    b = torch.tensor([0.3, -0.5], dtype=DTYPE)
    res = probability_ig_distribution(model, lik, x, b, num_samples=S, path_order=24,
                                      generator=torch.Generator().manual_seed(6))  # fmt: skip
    # reference: 48 Gauss-Legendre nodes, f and ∂f by finite differences of draws at all nodes jointly
    t, w = np.polynomial.legendre.leggauss(48)
    t = torch.as_tensor((t + 1) / 2, dtype=DTYPE)
    w = torch.as_tensor(w / 2, dtype=DTYPE)
    nodes = b + t[:, None] * (x[0] - b)  # (J, D)
    f, df = _fd_at(model, nodes, seed=12)  # (S, J, [C]), (S, J, [C,] D)
    _, dp = _prob_and_grad(kind, f.reshape(-1, *f.shape[2:]), df.reshape(-1, *df.shape[2:]))
    dp = dp.reshape(S, t.numel(), *dp.shape[1:])
    wshape = (1, -1) + (1,) * (dp.dim() - 2)
    ref = ((dp * w.view(wshape)).sum(1) * (x[0] - b)).unsqueeze(1)  # (S, 1, [C,] D)
    _compare(res, ref, f"{kind} IG")
    # each draw is complete up to the path quadrature, and the mean agrees with the expected IG
    # (rare draws with very wiggly paths carry a larger quadrature error: checked on 99 % of the draws)
    gap = res.completeness_gap.abs().flatten()
    assert torch.quantile(gap, 0.5) < 1e-6 and torch.quantile(gap, 0.99) < 1e-3 * res.std.max()
    exp = expected_probability_ig(model, lik, x, b, num_samples=4000, path_order=24,
                                  generator=torch.Generator().manual_seed(3))  # fmt: skip
    se = res.standard_error if exp.standard_error is None else (res.standard_error**2 + exp.standard_error**2).sqrt()
    assert ((res.mean - exp.mean).abs() <= 4.5 * se).all()


def test_bad_arguments():
    model = SVGP().eval()
    with pytest.raises(ValueError, match="level"):
        probability_gradient_distribution(model, BernoulliLikelihood(), _points(), level=1.5)
    with pytest.raises(ValueError, match="num_samples"):
        probability_gradient_distribution(model, BernoulliLikelihood(), _points(), num_samples=1)
    with pytest.raises(ValueError, match="path_order"):
        probability_ig_distribution(model, BernoulliLikelihood(), _points(), path_order=0)
    with pytest.raises(NotImplementedError, match="SoftmaxLikelihood"):
        probability_gradient_distribution(model, SoftmaxLikelihood(num_classes=C, mixing_weights=False), _points())


class LogitBernoulli(BernoulliLikelihood):
    def forward(self, function_samples, *args, **kwargs):
        return torch.distributions.Bernoulli(probs=torch.sigmoid(function_samples))


def test_logit_link_mean_matches_gauss_hermite_expectation():
    model = SVGP(seed=3).eval()
    x = _points(m=3, seed=8)
    res = probability_gradient_distribution(model, LogitBernoulli(), x, num_samples=S,
                                            generator=torch.Generator().manual_seed(9))  # fmt: skip
    exp = expected_probability_gradient(model, LogitBernoulli(), x)
    assert exp.method == "gauss-hermite"
    assert ((res.mean - exp.mean).abs() <= 4.5 * res.standard_error).all()
    probs = res.probability_samples
    assert ((probs.mean(0) - exp.probability).abs() <= 4.5 * probs.std(0) / S**0.5).all()
