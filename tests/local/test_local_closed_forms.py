"""Closed forms behind LocalGPExplainer, each against a brute-force recomputation (float64)."""

import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP

from gpytorch_explain import PosteriorGradient
from gpytorch_explain.local import GradientVarianceReduction, LocalGPExplainer, loo_predictions
from gpytorch_explain.local.acquisition import gradient_cross_covariance
from gpytorch_explain.local.surrogate import make_surrogate
from tests.helpers import NO_RELEVANCE

#: every test here runs with float64 as torch's default dtype (the shared fixture in tests/conftest.py)
pytestmark = pytest.mark.usefixtures("float64")


def _gp(n=9, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    U = torch.rand(n, d, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.sin(2 * U[:, 0]) + U[:, 1] ** 2 - 0.5 * U[:, 2]
    model = make_surrogate(U, (y - y.mean()) / y.std())
    model.covar_module.lengthscale = torch.tensor([[0.7, 1.3, 2.0]])
    model.likelihood.noise = torch.tensor([1e-2])
    return model.eval(), U, y


def _grad_trace(model, u0):
    return PosteriorGradient(model)(u0[None]).variance.sum().item()


@pytest.mark.parametrize("q", [1, 3])
def test_gradient_variance_reduction_matches_adding_the_points(q):
    model, U, y = _gp()
    u0 = torch.tensor([0.1, -0.2, 0.3])
    Z = torch.rand(2, q, 3, generator=torch.Generator().manual_seed(1)) * 2 - 1
    before = _grad_trace(model, u0)
    acq = GradientVarianceReduction(model, u0)
    values = acq(Z)
    for b in range(Z.size(0)):
        # brute force: the same hyperparameters, the candidates added with arbitrary targets (covariance is y-free)
        for targets in (torch.zeros(q), torch.randn(q, generator=torch.Generator().manual_seed(b)) * 5):
            bigger = SingleTaskGP(
                torch.cat([U, Z[b]]),
                torch.cat([model.train_targets, targets]).unsqueeze(-1),
                covar_module=model.covar_module,
                likelihood=model.likelihood,
                outcome_transform=None,
            ).eval()
            bigger.mean_module.load_state_dict(model.mean_module.state_dict())
            after = _grad_trace(bigger, u0)
            assert values[b].item() == pytest.approx(before - after, rel=1e-7, abs=1e-10)
    assert (values > 0).all()


def test_gradient_cross_covariance_is_differentiable_and_matches_autograd_cross():
    model, U, y = _gp()
    u0 = torch.zeros(3)
    z = torch.tensor([[[0.3, 0.5, -0.4]]], requires_grad=True)
    c, V = gradient_cross_covariance(model, u0, z)
    # brute force: posterior covariance of f(u) and f(z) differentiated in u by autograd on dense matrices
    k = model.covar_module
    X = U
    C = k(X).to_dense() + model.likelihood.noise * torch.eye(len(X))

    def post_cov(u):
        return (
            k(u[None], z[0].detach()).to_dense()
            - k(u[None], X).to_dense() @ torch.linalg.solve(C, k(X, z[0].detach()).to_dense())
        )[0, 0]

    ref = torch.autograd.functional.jacobian(post_cov, u0)
    assert torch.allclose(c[0, :, 0].detach(), ref, atol=1e-10)
    acq = GradientVarianceReduction(model, u0)
    acq(z).sum().backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


def test_closed_form_loo_matches_refits_without_refitting_hyperparameters():
    model, U, y = _gp(n=12)
    loo = loo_predictions(model)
    targets = model.train_targets
    for i in range(len(U)):
        keep = torch.arange(len(U)) != i
        sub = SingleTaskGP(
            U[keep],
            targets[keep].unsqueeze(-1),
            covar_module=model.covar_module,
            likelihood=model.likelihood,
            outcome_transform=None,
        ).eval()
        sub.mean_module.load_state_dict(model.mean_module.state_dict())
        with torch.no_grad():
            mu = sub.posterior(U[i : i + 1]).mean.item()
        assert loo[i].item() == pytest.approx(mu, rel=1e-8, abs=1e-10)


def _explanation(**kw):
    rs = np.random.RandomState(0)
    scales = np.array([1.0, 3.0, 0.2, 1.0])
    data = rs.randn(200, 4) * scales + np.array([0.0, 10.0, -1.0, 2.0])
    f = lambda X: np.sin(X[:, 0]) + 0.3 * X[:, 1] - 2.0 * X[:, 2] ** 2 + 0.0 * X[:, 3]  # noqa: E731
    kw = {"budget": 16, "seed": 0, "raw_samples": 16, "interval": 0.5, **NO_RELEVANCE} | kw
    return LocalGPExplainer(f, data, **kw).explain(data[3]), data


def test_gradient_in_user_units_matches_finite_differences_of_the_surrogate_mean():
    res, data = _explanation()
    x = res.x
    for i in range(4):
        h = 1e-5 * data[:, i].std()
        e = np.eye(4)[i] * h
        fd = (res.predict(x + e)[0][0] - res.predict(x - e)[0][0]) / (2 * h)
        assert res.gradient_mean[i] == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_integrated_gradients_match_quadrature_of_the_surrogate_gradient():
    res, data = _explanation()
    x, b = res.x, res.baseline
    nodes, weights = np.polynomial.legendre.leggauss(40)
    t, w = (nodes + 1) / 2, weights / 2
    ig = np.zeros(4)
    for tk, wk in zip(t, w, strict=True):
        p = b + tk * (x - b)
        for i in range(4):
            h = 1e-5 * data[:, i].std()
            e = np.eye(4)[i] * h
            ig[i] += wk * (x[i] - b[i]) * (res.predict(p + e)[0][0] - res.predict(p - e)[0][0]) / (2 * h)
    np.testing.assert_allclose(res.integrated_gradients, ig, rtol=1e-5, atol=1e-7)
    # completeness of the surrogate in the user's units
    diff = res.predict(x)[0][0] - res.predict(b)[0][0]
    assert res.integrated_gradients.sum() == pytest.approx(diff, rel=1e-6, abs=1e-8)


def test_fidelity_is_the_closed_form_loo_r2_of_the_samples():
    res, _ = _explanation()
    assert np.isfinite(res.fidelity) and res.fidelity <= 1.0
    assert res.fidelity > 0.5  # a smooth 4-D function in a small box is well explained
