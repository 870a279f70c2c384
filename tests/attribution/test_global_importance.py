"""Global importance with uncertainty against independent Monte Carlo (float64).

Reference: joint draws of the latent f from an exact GP's own predictive ``model(points)`` at X ± h e_i (h = 1e-3),
gradients by central differences of each draw, then mean |∂f| over the points per draw. The library draws the
gradients from the joint attribution posterior instead. Means, stds and 5 % / 50 % / 95 % quantiles agree within
4.5 combined Monte Carlo standard errors (estimated from the draws); the exact expectation (folded normal) agrees
with both sample means within 4.5 standard errors.
"""

from __future__ import annotations

import pytest
import torch
from gpytorch.distributions import MultivariateNormal
from gpytorch.kernels import RBFKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.means import ConstantMean
from gpytorch.models import ExactGP

from gpytorch_explain.attribution import PosteriorGradient, PosteriorIntegratedGradients
from gpytorch_explain.attribution.global_importance import GlobalImportance, global_importance

DTYPE = torch.float64
D, N, M, S, H = 2, 12, 5, 20_000, 1e-3


class GP(ExactGP):
    def __init__(self, x, y):
        super().__init__(x, y, GaussianLikelihood())
        self.mean_module = ConstantMean()
        self.covar_module = ScaleKernel(RBFKernel(ard_num_dims=D))
        self.to(DTYPE)
        self.likelihood.noise = 0.05
        self.covar_module.outputscale = 1.5
        self.covar_module.base_kernel.lengthscale = torch.tensor([0.6, 1.2], dtype=DTYPE)

    def forward(self, x):
        return MultivariateNormal(self.mean_module(x), self.covar_module(x))


@pytest.fixture(scope="module")
def setup():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(N, D, generator=gen, dtype=DTYPE) * 2 - 1
    y = torch.sin(2 * x[:, 0]) + 0.3 * x[:, 1] + 0.1 * torch.randn(N, generator=gen, dtype=DTYPE)
    X = torch.rand(M, D, generator=gen, dtype=DTYPE) * 2.4 - 1.2  # some points away from the data: uncertain
    return GP(x, y).eval(), X


def _std_se(x):
    dev2 = (x - x.mean(0)).square()
    return (dev2.var(0) / x.size(0)).sqrt() / (2 * x.std(0))


def _quantile_se(x, q, delta=0.01):
    lo, hi = torch.quantile(x, q - delta, dim=0), torch.quantile(x, q + delta, dim=0)
    return (q * (1 - q) / x.size(0)) ** 0.5 * (hi - lo) / (2 * delta)


def _reference(model, X, seed=11):
    """S draws of mean_p |∂f(X_p)| per feature from finite differences of joint draws of f."""
    steps = H * torch.eye(D, dtype=DTYPE)
    pts = torch.stack([X[:, None] + steps, X[:, None] - steps], 2).reshape(-1, D)  # (M, D, 2)
    with torch.no_grad():
        out = model(pts)
        mean, cov = out.mean, out.covariance_matrix
    evals, evecs = torch.linalg.eigh(0.5 * (cov + cov.mT))
    root = evecs * evals.clamp_min(0).sqrt()
    eps = torch.randn(S, pts.size(0), generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    f = (mean + eps @ root.mT).reshape(S, M, D, 2)
    grad = (f[..., 0] - f[..., 1]) / (2 * H)  # (S, M, D)
    return grad.abs().mean(1)


def test_gradient_importance_matches_independent_monte_carlo(setup):
    model, X = setup
    res = global_importance(model, X, kind="gradient", num_samples=S, generator=torch.Generator().manual_seed(3))
    assert isinstance(res, GlobalImportance) and res.samples.shape == (S, D) and res.kind == "gradient"
    ref = _reference(model, X)
    lib, z = res.samples, 4.5
    se = (lib.var(0) / S + ref.var(0) / S).sqrt()
    assert ((lib.mean(0) - ref.mean(0)).abs() <= z * se).all()
    se = (_std_se(lib) ** 2 + _std_se(ref) ** 2).sqrt()
    assert ((lib.std(0) - ref.std(0)).abs() <= z * se).all()
    assert (se < 0.05 * ref.std(0)).all()
    for q in (0.05, 0.5, 0.95):
        se = (_quantile_se(lib, q) ** 2 + _quantile_se(ref, q) ** 2).sqrt()
        assert ((torch.quantile(lib, q, dim=0) - torch.quantile(ref, q, dim=0)).abs() <= z * se).all(), q
    # the exact expectation (folded normal) against both sample means; the plug-in is biased low
    for draws in (lib, ref):
        assert ((res.expected - draws.mean(0)).abs() <= z * draws.std(0) / S**0.5).all()
    assert (res.plug_in <= res.expected + 1e-12).all()
    torch.testing.assert_close(res.lower, torch.quantile(lib, 0.05, dim=0))
    torch.testing.assert_close(res.upper, torch.quantile(lib, 0.95, dim=0))


def test_joint_draws_matter(setup):
    """The spread of G uses the correlations between points: independent per-point draws give another std."""
    model, X = setup
    attr = PosteriorGradient(model)(X)
    res = global_importance(attr, num_samples=S, generator=torch.Generator().manual_seed(4))
    mean, sd = attr.mean, attr.variance.sqrt()
    indep = (mean + sd * torch.randn(S, M, D, generator=torch.Generator().manual_seed(5), dtype=DTYPE)).abs().mean(1)
    se = (_std_se(res.samples) ** 2 + _std_se(indep) ** 2).sqrt()
    assert ((res.std - indep.std(0)).abs() > 5 * se).any()


def test_sources_agree_and_ig(setup):
    model, X = setup
    b = torch.zeros(D, dtype=DTYPE)
    gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    a = global_importance(model, X, kind="ig", baseline=b, num_samples=500, generator=gen())
    c = global_importance(PosteriorIntegratedGradients(model, baseline=b), X, num_samples=500, generator=gen())
    d = global_importance(PosteriorIntegratedGradients(model, baseline=b)(X), num_samples=500, generator=gen())
    assert a.kind == c.kind == "ig" and d.kind == "given"
    torch.testing.assert_close(a.samples, c.samples)
    torch.testing.assert_close(a.samples, d.samples)
    assert ((a.expected - a.mean).abs() <= 4.5 * a.std / 500**0.5).all()
    probs = a.ranking_probability()
    assert probs.shape == (D, D)
    torch.testing.assert_close(probs.sum(0), torch.ones(D, dtype=DTYPE))
    torch.testing.assert_close(probs.sum(1), torch.ones(D, dtype=DTYPE))
    text = global_importance(model, X, kind="ig", num_samples=200, feature_names=["a", "b"]).summary()
    assert "± 1 std" in text and "90% credible interval" in text


def test_bad_arguments(setup):
    model, X = setup
    with pytest.raises(ValueError, match="kind"):
        global_importance(model, X, kind="shap")
    with pytest.raises(ValueError, match="needs the dataset"):
        global_importance(model)
    with pytest.raises(ValueError, match="only with a model"):
        global_importance(PosteriorGradient(model)(X), X)
    with pytest.raises(ValueError, match="level"):
        global_importance(model, X, level=0.0)
    with pytest.raises(ValueError, match="num_samples"):
        global_importance(model, X, num_samples=1)
    with pytest.raises(ValueError, match="feature_names"):
        global_importance(model, X, feature_names=["a"])
    with pytest.raises(ValueError, match="baseline applies"):
        global_importance(model, X, kind="gradient", baseline=torch.zeros(D, dtype=DTYPE))


def test_batched_attributions(setup):
    """A batch of attribution GPs (here the same points twice): one importance per batch entry."""
    model, X = setup
    single = global_importance(model, X, kind="gradient", num_samples=300)
    res = global_importance(model, X.expand(2, M, D), kind="gradient", num_samples=300)
    assert res.samples.shape == (300, 2, D) and res.lower.shape == (2, D)
    torch.testing.assert_close(res.expected, single.expected.expand(2, D), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(res.plug_in, single.plug_in.expand(2, D), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="unbatched"):
        res.summary()
