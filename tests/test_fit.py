"""``gpytorch_explain.fit``: the fit functions equal the ``.fit()`` wrappers, take a model or its objective, and
refuse other models; ``GPXMultivariateNormal`` carries the weight-noise variance the tight ELBO integrates."""

from __future__ import annotations

import gpytorch
import pytest
import torch

from gpytorch_explain import (
    GPXModel,
    GPXVariationalELBO,
    VariationalGPXModel,
    fit_gpx_model,
    fit_variational_gpx_model,
)
from gpytorch_explain.distributions import GPXMultivariateNormal
from gpytorch_explain.mlls import gpx_expected_log_prob

DT = torch.float64


def _data(n=25, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, dtype=DT, generator=g)
    return x, x[:, 0] * torch.sin(x[:, 1]) + 0.05 * torch.randn(n, dtype=DT, generator=g)


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_fit_gpx_model_equals_the_method_and_accepts_the_mll():
    x, y = _data()
    a = GPXModel(x, y).fit(max_iter=8)
    b = fit_gpx_model(GPXModel(x, y), max_iter=8)
    model = GPXModel(x, y)
    c = fit_gpx_model(gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model), max_iter=8)
    assert c is model and not c.training
    for other in (b, c):
        assert other.fit_history == a.fit_history
        for key, value in _state(a).items():
            torch.testing.assert_close(_state(other)[key], value, rtol=0, atol=0)


def test_fit_variational_gpx_model_equals_the_method_and_accepts_the_elbo():
    x, y = _data(60)
    kw = dict(num_epochs=2, batch_size=20, shuffle=False)
    torch.manual_seed(0)
    a = VariationalGPXModel(x[:6]).fit(x, y, **kw)
    torch.manual_seed(0)
    b = fit_variational_gpx_model(VariationalGPXModel(x[:6]), x, y, **kw)
    torch.manual_seed(0)
    model = VariationalGPXModel(x[:6])
    c = fit_variational_gpx_model(GPXVariationalELBO(model.likelihood, model, num_data=60), x, y, **kw)
    assert c is model and not c.training
    for other in (b, c):
        assert other.fit_history == pytest.approx(a.fit_history, rel=1e-12)
        for key, value in _state(a).items():
            torch.testing.assert_close(_state(other)[key], value, rtol=1e-12, atol=1e-12)


def test_fit_functions_refuse_other_models():
    x, y = _data()
    with pytest.raises(TypeError, match="fit_gpx_model"):
        fit_gpx_model(VariationalGPXModel(x[:5]))
    with pytest.raises(TypeError, match="fit_variational_gpx_model"):
        fit_variational_gpx_model(GPXModel(x, y), x, y)


def test_latent_carries_the_weight_noise_and_the_elbo_integrates_it():
    """The ELBO's likelihood term equals gpx_expected_log_prob on (mean, variance - s, s), s = σw²‖z‖², computed
    here from the model's own parameters; a plain MultivariateNormal falls back to GPyTorch's ELBO."""
    x, y = _data(30)
    model = VariationalGPXModel(x[:8], weight_noise=0.3)
    f = model(x)
    assert isinstance(f, GPXMultivariateNormal)
    s = model.weight_noise * x.square().sum(-1)
    torch.testing.assert_close(f.weight_noise_variance, s)
    elbo = GPXVariationalELBO(model.likelihood, model, num_data=30)
    ref = gpx_expected_log_prob(model.likelihood, y, f.mean, f.variance - s, s).sum()
    torch.testing.assert_close(elbo._log_likelihood_term(f, y), ref)
    plain = gpytorch.distributions.MultivariateNormal(f.mean, f.lazy_covariance_matrix)
    looser = gpytorch.mlls.VariationalELBO(model.likelihood, model, num_data=30)._log_likelihood_term(plain, y)
    torch.testing.assert_close(elbo._log_likelihood_term(plain, y), looser)
    assert elbo._log_likelihood_term(f, y) > looser  # Jensen: the tight term is larger for σw² > 0
    # distributions GPyTorch derives (marginals, sums) carry no s
    assert model.likelihood(f).weight_noise_variance is None
    with pytest.raises(ValueError, match="shape of the mean"):
        GPXMultivariateNormal(f.mean, f.lazy_covariance_matrix, weight_noise_variance=s[:3])


def _loo_log_density(model, x, y) -> float:
    """Mean leave-one-out log predictive density, by conditioning the dense covariance on n - 1 rows, n times."""
    with torch.no_grad():
        model.train()
        cov = model.likelihood(gpytorch.models.ExactGP.__call__(model, x)).covariance_matrix
        model.eval()
    n = y.numel()
    total = 0.0
    for i in range(n):
        keep = torch.arange(n) != i
        k = cov[i, keep]
        sol = torch.linalg.solve(cov[keep][:, keep], torch.stack([y[keep], k], -1))
        mu, var = k @ sol[:, 0], cov[i, i] - k @ sol[:, 1]
        total += float(torch.distributions.Normal(mu, var.sqrt()).log_prob(y[i]))
    return total / n


def test_fit_gpx_model_optimises_the_objective_it_is_given():
    # a LeaveOneOutPseudoLikelihood must be the objective (it was silently replaced by the exact marginal
    # likelihood on the dense path): the loss the fit records is minus the brute-force LOO density, and the fit
    # ends at a higher LOO density than the marginal-likelihood fit of the same data
    x, y = _data(30, seed=3)
    ml = GPXModel(x, y).fit()
    model = GPXModel(x, y)
    fit_gpx_model(gpytorch.mlls.LeaveOneOutPseudoLikelihood(model.likelihood, model))
    loo = _loo_log_density(model, x, y)
    assert model.fit_history[-1] == pytest.approx(-loo, rel=1e-8, abs=1e-10)
    assert loo > _loo_log_density(ml, x, y) + 1e-4
    assert model.fit_history[-1] != pytest.approx(ml.fit_history[-1], rel=1e-3)


def test_lbfgs_runs_max_iter_iterations_and_the_model_is_in_eval_mode_after_a_failed_fit():
    # torch's L-BFGS caps objective evaluations at 1.25 max_iter by default: max_iter=2 ran 1 iteration
    x, y = _data()
    for k in (2, 4, 10):
        model = fit_gpx_model(GPXModel(x, y), max_iter=k, tolerance=1e-14)
        assert model.fit_iterations == k, (k, model.fit_iterations, model.fit_evaluations)
    model = GPXModel(x, y).eval()
    with pytest.raises(ValueError, match="learning rate"):
        fit_gpx_model(model, optimizer="adam", lr=float("nan"))
    assert not model.training and not model.likelihood.training
