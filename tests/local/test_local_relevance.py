"""The relevance surrogate (SAAS prior): its objective by brute force, and no-effect features at relevance ≈ 0."""

import math

import numpy as np
import pytest
import torch

from gpytorch_explain.local import LocalGPExplainer
from gpytorch_explain.local.surrogate import fit_surrogate, log_posterior, make_relevance_surrogate, make_surrogate
from tests.helpers import NO_RELEVANCE


def _half_cauchy_logpdf(x: torch.Tensor, scale: float) -> torch.Tensor:
    return math.log(2.0 / (math.pi * scale)) - torch.log1p((x / scale) ** 2)


def test_relevance_surrogate_objective_matches_a_dense_brute_force():
    """log N(y; c, s·K_RBF + σ²I) + Σ log HC(τ/ℓᵢ²; 1) + log HC(τ; 0.1) + log LN(σ²; -4, 1), per sample."""
    g = torch.Generator().manual_seed(3)
    U = torch.rand(25, 3, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.sin(2 * U[:, 0]) - U[:, 1]
    y = (y - y.mean()) / y.std()
    model = make_relevance_surrogate(make_surrogate(U, y))
    fit_surrogate(model, maxiter=30, final=False)  # anywhere away from the initial values
    rbf = model.covar_module.base_kernel
    with torch.no_grad():
        ell = rbf.lengthscale.reshape(-1)
        tau = rbf.raw_tau_constraint.transform(rbf.raw_tau).reshape(())
        s = model.covar_module.outputscale.reshape(())
        noise = model.likelihood.noise.reshape(())
        c = model.mean_module.constant.reshape(())
        diff = (U[:, None, :] - U[None, :, :]) / ell
        C = s * torch.exp(-0.5 * (diff**2).sum(-1)) + noise * torch.eye(25, dtype=U.dtype)
        r = y - c
        loglik = -0.5 * r @ torch.linalg.solve(C, r) - 0.5 * torch.logdet(C) - 12.5 * math.log(2 * math.pi)
        log_ln = -torch.log(noise * math.sqrt(2 * math.pi)) - (torch.log(noise) + 4.0) ** 2 / 2
        logprior = _half_cauchy_logpdf(tau / ell**2, 1.0).sum() + _half_cauchy_logpdf(tau, 0.1) + log_ln
    assert math.isclose(log_posterior(model), float((loglik + logprior) / 25), rel_tol=1e-8, abs_tol=1e-10)


def _relevance(prior: str) -> np.ndarray:
    data = np.random.RandomState(0).randn(200, 4)
    f = lambda X: 2.0 * X[:, 0] - X[:, 1] + np.sin(X[:, 0])  # noqa: E731  (features 2 and 3: no effect)
    # no stencil: the samples spread over the box, where the log-normal prior's hold on no-effect lengthscales shows
    ex = LocalGPExplainer(
        f, data, budget=30, seed=0, acquisition="variance", raw_samples=16, relevance_prior=prior, stencil=None
    )
    return ex.explain(data[1]).relevance


def test_no_effect_features_get_relevance_near_zero_under_saas_only():
    saas, lognormal = _relevance("saas"), _relevance("lognormal")
    assert math.isclose(saas.sum(), 1.0) and math.isclose(lognormal.sum(), 1.0)
    assert saas[2:].max() < 0.01 < saas[:2].min()
    # the acquisition surrogate's log-normal prior holds no-effect lengthscales at its mode: a visible share
    assert lognormal[2:].min() > 0.02


def test_constant_black_box_warns_that_relevance_means_nothing():
    data = np.random.RandomState(0).randn(100, 3)
    res = LocalGPExplainer(lambda X: np.full(len(X), 2.5), data, budget=12, seed=0, raw_samples=16).explain(data[0])
    assert math.isclose(res.relevance.sum(), 1.0)
    assert any("found no feature with an effect" in w for w in res.warnings)


def test_linear_black_box_is_not_reported_as_without_effect():
    # every SAAS lengthscale runs long on a linear function (its output scale grows with them): that is not "no
    # effect", and the relevances order the features by their slope times their box half-width
    scales = np.array([1.0, 10.0, 0.1])
    data = np.random.RandomState(1).randn(300, 3) * scales
    slopes = np.array([1.0, 0.05, 4.0])  # effects across the box: 1, 0.5, 0.4 (box units: std-scaled)
    res = LocalGPExplainer(lambda X: X @ slopes, data, budget=17, seed=5, raw_samples=16).explain(data[7])
    assert not any("found no feature with an effect" in w for w in res.warnings), res.warnings
    assert list(np.argsort(-res.relevance)) == [0, 1, 2], res.relevance


def test_the_relevance_options_change_only_the_relevance():
    """``NO_RELEVANCE`` (tests/helpers.py), which the tests that read no relevance pass to save time, leaves the
    samples and every other read-out as the defaults give them, to the bit."""
    data = np.random.RandomState(2).randn(150, 4)
    f = lambda X: X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 * np.sin(X[:, 0] * X[:, 1])  # noqa: E731
    kw = dict(budget=16, seed=4, raw_samples=16)
    default = LocalGPExplainer(f, data, **kw).explain(data[0])
    fast = LocalGPExplainer(f, data, **kw, **NO_RELEVANCE).explain(data[0])
    for name in (
        "x_samples",
        "y_samples",
        "gradient_mean",
        "gradient_std",
        "gradient_from_stencil",
        "integrated_gradients",
        "integrated_gradients_std",
        "baseline",
    ):
        np.testing.assert_array_equal(getattr(fast, name), getattr(default, name), err_msg=name)
    assert fast.fidelity == default.fidelity
    for a, b in zip(fast.predict(data[:3]), default.predict(data[:3]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_relevance_prior():
    with pytest.raises(ValueError, match="relevance_prior"):
        LocalGPExplainer(lambda X: X[:, 0], np.random.RandomState(0).randn(20, 2), relevance_prior="horseshoe")
