"""The surrogates' fitting objective as one dense function (``gpytorch_explain.local.dense_objective``).

Checked in float64 against an independent brute force (numpy Gaussian log density from ``slogdet``/``solve``, the
priors' densities from ``scipy.stats`` with the parameters the surrogates document), against GPyTorch's own
``ExactMarginalLogLikelihood`` (value and autograd gradients), and against central finite differences.
"""

import math
import warnings

import gpytorch
import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms import Standardize
from botorch.optim.utils import get_parameters_and_bounds
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from scipy import stats

from gpytorch_explain.local import dense_objective
from gpytorch_explain.local.dense_objective import (
    DenseObjective,
    dense_fits,
    dense_fits_enabled,
    dense_kernel_matrix,
    dense_loss_closure,
    dense_negative_objective,
    supports_dense_objective,
)
from gpytorch_explain.local.surrogate import (
    TREND_NOISE_PRIOR,
    fit_surrogate,
    log_posterior,
    make_relevance_surrogate,
    make_surrogate,
    make_trend_surrogate,
)

D = 5


def _data(seed: int, n: int = 24):
    g = torch.Generator().manual_seed(seed)
    U = torch.rand(n, D, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.sin(2 * U[:, 0]) + U[:, 1] ** 2 - 0.5 * U[:, 2]
    return U, (y - y.mean()) / y.std()


def _surrogate(kind: str, seed: int):
    """A surrogate of the explainer at random (not fitted) hyperparameters."""
    U, y = _data(seed)
    rng = np.random.RandomState(seed)
    base = make_surrogate(U, y)
    with torch.no_grad():
        base.covar_module.lengthscale = torch.as_tensor(rng.uniform(0.3, 3.0, (1, D)))
        base.likelihood.noise = torch.tensor(rng.uniform(1e-3, 0.1), dtype=torch.float64)
        base.mean_module.constant = torch.tensor(rng.randn() * 0.3, dtype=torch.float64)
    if kind == "rbf":
        return base
    if kind in ("trend", "trend_fixed_noise"):
        model = make_trend_surrogate(base, noise=1e-3 if kind == "trend_fixed_noise" else None)
        with torch.no_grad():
            model.covar_module.kernels[0].variance = torch.tensor(rng.uniform(0.1, 2.0), dtype=torch.float64)
            model.covar_module.kernels[1].outputscale = torch.tensor(rng.uniform(0.1, 2.0), dtype=torch.float64)
        return model
    model = make_relevance_surrogate(base)
    with torch.no_grad():
        rbf = model.covar_module.base_kernel
        rbf.lengthscale = torch.as_tensor(rng.uniform(0.3, 30.0, (1, D)))
        rbf.raw_tau.fill_(math.log(rng.uniform(0.01, 1.0)))  # log-scale parameter (add_saas_prior's default)
        model.covar_module.outputscale = torch.tensor(rng.uniform(0.3, 2.0), dtype=torch.float64)
    return model


def _brute_objective(model, kind: str) -> float:
    """-(log N(y; c, K + s2 I) + log priors) / n with numpy and scipy.stats, the kernel from its definition."""
    U = model.train_inputs[0].numpy()
    y = model.train_targets.numpy()
    n = len(y)
    c = float(model.mean_module.constant.detach())
    noise = float(model.likelihood.noise.detach())
    sq = (U[:, None, :] - U[None, :, :]) ** 2
    if kind == "saas":
        rbf = model.covar_module.base_kernel
    elif kind == "rbf":
        rbf = model.covar_module
    else:
        rbf = model.covar_module.kernels[1].base_kernel
    ell = rbf.lengthscale.detach().numpy().reshape(-1)
    K = np.exp(-0.5 * (sq / ell**2).sum(-1))
    if kind == "saas":
        K = float(model.covar_module.outputscale) * K
    elif kind != "rbf":
        K = float(model.covar_module.kernels[1].outputscale) * K
        K = K + float(model.covar_module.kernels[0].variance) * (U @ U.T)
    C = K + noise * np.eye(n)
    sign, logdet = np.linalg.slogdet(C)
    assert sign > 0
    r = y - c
    log_lik = -0.5 * r @ np.linalg.solve(C, r) - 0.5 * logdet - 0.5 * n * math.log(2 * math.pi)
    # priors, as the surrogates' docstrings state them
    noise_loc, noise_scale = (-4.0, 1.0) if kind in ("rbf", "saas", "trend_fixed_noise") else TREND_NOISE_PRIOR
    log_prior = stats.lognorm(s=noise_scale, scale=math.exp(noise_loc)).logpdf(noise)
    if kind == "saas":
        tau = float(rbf.tau) if hasattr(rbf, "tau") else math.exp(float(rbf.raw_tau))
        log_prior += stats.halfcauchy(scale=0.1).logpdf(tau)
        log_prior += stats.halfcauchy(scale=1.0).logpdf(tau / ell**2).sum()
    else:
        loc = math.sqrt(2.0) + 0.5 * math.log(D) + math.log(2.0)
        log_prior += stats.lognorm(s=1.0, scale=math.exp(loc)).logpdf(ell).sum()
    return -(log_lik + log_prior) / n


def _params(mll):
    params, _ = get_parameters_and_bounds(mll)
    return {k: p for k, p in params.items() if p.requires_grad}


def _gpytorch_loss_and_grads(mll, params):
    mll.model.train()
    for p in params.values():
        p.grad = None
    loss = -mll(mll.model(*mll.model.train_inputs), mll.model.train_targets)
    grads = torch.autograd.grad(loss, list(params.values()))
    return loss.detach(), grads


KINDS = ["rbf", "trend", "trend_fixed_noise", "saas"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_dense_objective_matches_brute_force_and_gpytorch(kind, seed):
    model = _surrogate(kind, seed)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    assert supports_dense_objective(mll)
    params = _params(mll)
    dense_loss, dense_grads = dense_loss_closure(mll, params)()
    brute = _brute_objective(model, kind)
    # 1e-7: BoTorch's default noise prior keeps float32 parameters (LogNormal(-4, 1)), so its log density carries
    # float32 round-off (~5e-8 per sample here); GPyTorch's own objective has it too (compared at 1e-11 below)
    assert float(dense_loss) == pytest.approx(brute, rel=1e-7, abs=1e-7)
    ref_loss, ref_grads = _gpytorch_loss_and_grads(mll, params)
    assert float(dense_loss) == pytest.approx(float(ref_loss), rel=1e-11, abs=1e-11)
    for name, g_dense, g_ref in zip(params, dense_grads, ref_grads, strict=True):
        np.testing.assert_allclose(g_dense.numpy(), g_ref.numpy(), rtol=1e-8, atol=1e-10, err_msg=name)
    # the public one-shot form agrees with the closure
    assert float(dense_negative_objective(mll)) == pytest.approx(float(dense_loss), rel=1e-14)


@pytest.mark.parametrize("kind", ["trend", "saas"])
def test_dense_objective_gradient_against_finite_differences(kind):
    model = _surrogate(kind, 3)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    params = _params(mll)
    objective = DenseObjective(mll)
    _, grads = dense_loss_closure(mll, params)()
    h = 1e-6
    for (name, p), g in zip(params.items(), grads, strict=True):
        flat = p.data.view(-1)
        for j in range(flat.numel()):
            old = float(flat[j])
            with torch.no_grad():
                flat[j] = old + h
                up = float(objective())
                flat[j] = old - h
                down = float(objective())
                flat[j] = old
            assert float(g.reshape(-1)[j]) == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-7), name


def test_kernel_matrix_of_other_kernels_goes_through_gpytorch():
    U, _ = _data(4, n=9)
    kernel = ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=D)).to(U)
    np.testing.assert_allclose(dense_kernel_matrix(kernel, U).detach(), kernel(U).to_dense().detach(), rtol=1e-14)
    model = _surrogate("trend", 4)
    np.testing.assert_allclose(
        dense_kernel_matrix(model.covar_module, model.train_inputs[0]).detach(),
        model.covar_module(model.train_inputs[0]).to_dense().detach(),
        rtol=1e-12,
        atol=1e-14,
    )


def test_unsupported_models_are_refused_and_fitted_through_gpytorch():
    U, y = _data(5)
    model = SingleTaskGP(U, y.unsqueeze(-1), outcome_transform=Standardize(m=1))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    assert not supports_dense_objective(mll)
    with pytest.raises(ValueError, match="not supported"):
        DenseObjective(mll)
    # GPyTorch's settings that change its objective are honoured by falling back to it
    plain = _surrogate("rbf", 5)
    plain_mll = ExactMarginalLogLikelihood(plain.likelihood, plain)
    assert supports_dense_objective(plain_mll)
    with gpytorch.settings.max_cholesky_size(10):
        assert not supports_dense_objective(plain_mll)
    with gpytorch.settings.observation_nan_policy("mask"):
        assert not supports_dense_objective(plain_mll)
    two_outputs = SingleTaskGP(U, torch.stack([y, -y], -1), outcome_transform=None)
    assert not supports_dense_objective(ExactMarginalLogLikelihood(two_outputs.likelihood, two_outputs))
    # fit_surrogate still fits such a model (BoTorch's own objective)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not any("failed" in m for m in fit_surrogate(model, maxiter=20, final=False))


@pytest.mark.parametrize("kind", ["rbf", "saas"])
def test_fit_on_the_dense_objective_reaches_gpytorch_s_optimum(kind, monkeypatch):
    """A well-determined fit (60 samples of a smooth function in 2-D) ends at the same optimum either way."""
    calls = []
    original = dense_objective.DenseObjective.__call__

    def counted(self):
        calls.append(1)
        return original(self)

    monkeypatch.setattr(dense_objective.DenseObjective, "__call__", counted)
    g = torch.Generator().manual_seed(7)
    U = torch.rand(60, 2, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.sin(2 * U[:, 0]) + 0.5 * U[:, 1]
    y = (y - y.mean()) / y.std()
    base = make_surrogate(U, y)
    dense = base if kind == "rbf" else make_relevance_surrogate(base)
    fit_surrogate(dense, maxiter=500)
    assert calls  # the default fit evaluates the dense objective
    calls.clear()
    reference = make_surrogate(U, y)
    reference = reference if kind == "rbf" else make_relevance_surrogate(reference)
    with dense_fits(False):
        assert not dense_fits_enabled()
        fit_surrogate(reference, maxiter=500)
    assert dense_fits_enabled() and not calls  # the reference fit went through GPyTorch's marginal likelihood
    assert log_posterior(dense) == pytest.approx(log_posterior(reference), abs=1e-6)
    for (name, a), (_, b) in zip(dense.named_hyperparameters(), reference.named_hyperparameters(), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=2e-3, atol=2e-3, err_msg=name)
