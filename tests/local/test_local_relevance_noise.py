"""The relevance surrogate's fixed noise: ``LocalGPExplainer(relevance_noise=...)``,
``make_relevance_surrogate(model, noise=...)``."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from gpytorch_explain.local import PRESETS, LocalGPExplainer
from gpytorch_explain.local import readout as readout_module
from gpytorch_explain.local.surrogate import fit_surrogate, make_relevance_surrogate, make_surrogate


def _samples_with_a_stencil():
    """25 points in the box and a forward stencil of half-width 0.1 around the origin, on a smooth function."""
    g = torch.Generator().manual_seed(3)
    spread = torch.rand(25, 4, generator=g, dtype=torch.float64) * 2 - 1
    stencil = torch.cat([torch.zeros(1, 4, dtype=torch.float64), 0.1 * torch.eye(4, dtype=torch.float64)])
    U = torch.cat([stencil, spread])
    y = torch.tanh(U @ torch.tensor([1.5, -1.0, 0.4, 0.0], dtype=torch.float64)) + 0.2 * torch.sin(3 * U[:, 0])
    return U, (y - y.mean()) / y.std()


def _dense_posterior_mean_at_training_points(model) -> np.ndarray:
    """Independent numpy computation: c + K (K + s2 I)^-1 (y - c) from the fitted hyperparameters."""
    U = model.train_inputs[0].numpy()
    y = model.train_targets.numpy()
    ell = model.covar_module.base_kernel.lengthscale.detach().reshape(-1).numpy()
    amp = float(model.covar_module.outputscale.detach())
    c = float(model.mean_module.constant.detach())
    s2 = float(model.likelihood.noise.detach())
    diff = (U[:, None, :] - U[None, :, :]) / ell
    K = amp * np.exp(-0.5 * (diff**2).sum(-1))
    return c + K @ np.linalg.solve(K + s2 * np.eye(len(y)), y - c)


def test_fixed_noise_is_frozen_and_the_fit_interpolates():
    U, y = _samples_with_a_stencil()
    base = make_surrogate(U, y)
    fit_surrogate(base)

    learned = make_relevance_surrogate(base)
    fit_surrogate(learned)
    assert learned.likelihood.noise_covar.raw_noise.requires_grad
    assert float(learned.likelihood.noise.detach()) >= 1e-4  # BoTorch's floor: the default is unchanged

    fixed = make_relevance_surrogate(base, noise=1e-6)
    assert not fixed.likelihood.noise_covar.raw_noise.requires_grad
    fit_surrogate(fixed)
    assert math.isclose(float(fixed.likelihood.noise.detach()), 1e-6, rel_tol=1e-12)
    # the fixed-noise fit reproduces every sample, the stencil's next to the origin included
    resid = np.abs(_dense_posterior_mean_at_training_points(fixed) - y.numpy())
    assert resid.max() < 1e-3
    # the same computation on the learned-noise fit leaves residuals of the noise's size: the check can tell
    resid_learned = np.abs(_dense_posterior_mean_at_training_points(learned) - y.numpy())
    assert resid_learned.max() > 10 * resid.max()


def test_the_explainer_fits_its_relevance_with_the_fixed_noise(monkeypatch):
    seen = []
    original = readout_module.make_relevance_surrogate

    def spy(model, noise=None):
        out = original(model, noise=noise)
        seen.append(out)
        return out

    monkeypatch.setattr(readout_module, "make_relevance_surrogate", spy)
    data = np.random.RandomState(0).randn(200, 4)
    f = lambda X: X @ np.array([1.0, -0.5, 0.25, 0.0]) + 0.1 * np.sin(X[:, 0])  # noqa: E731
    kw = dict(budget=20, seed=4, raw_samples=16, relevance_noise=1e-6, relevance_bootstrap=0)
    res = LocalGPExplainer(f, data, **kw).explain(data[1])
    assert len(seen) == 1
    assert math.isclose(float(seen[0].likelihood.noise.detach()), 1e-6, rel_tol=1e-12)
    inv = 1.0 / seen[0].covar_module.base_kernel.lengthscale.detach().reshape(-1).numpy()
    np.testing.assert_allclose(res.relevance, inv / inv.sum(), rtol=1e-10)
    assert res.relevance[3] < 0.01  # no effect
    again = LocalGPExplainer(f, data, **kw).explain(data[1])
    np.testing.assert_array_equal(res.relevance, again.relevance)


def test_smooth_classifier_preset_on_a_30_feature_logistic_model():
    """The preset's setting (logit link, interpolating surrogates, one relevance fit): at 50 calls for 30 features
    the relevance orders the 27 effects like their true sizes and gives the 3 features without effect ~0."""
    D = 30
    a = np.concatenate([np.linspace(1.5, 0.2, D - 3), np.zeros(3)])
    data = np.random.RandomState(0).randn(300, D)

    def proba(X):
        return 1.0 / (1.0 + np.exp(-(X @ a + 0.3 * np.sin(X[:, 0] * X[:, 1]))))

    res = LocalGPExplainer(proba, data, budget=50, seed=1, **PRESETS["smooth_classifier"]).explain(data[1])
    assert res.relevance[D - 3 :].max() < 0.01
    assert spearmanr(res.relevance[: D - 3], a[: D - 3])[0] > 0.8


@pytest.mark.parametrize(
    "value, error",
    [
        (0.0, ValueError),
        (1.0, ValueError),
        (-1e-6, ValueError),
        (float("nan"), ValueError),
        (math.inf, ValueError),
        ("1e-6", TypeError),
        (True, TypeError),
    ],
)
def test_bad_relevance_noise(value, error):
    data = np.random.RandomState(0).randn(50, 3)
    with pytest.raises(error, match="relevance_noise"):
        LocalGPExplainer(lambda X: X[:, 0], data, relevance_noise=value)


def test_relevance_noise_needs_the_saas_relevance():
    data = np.random.RandomState(0).randn(50, 3)
    with pytest.raises(ValueError, match="relevance_prior='saas'"):
        LocalGPExplainer(lambda X: X[:, 0], data, relevance_noise=1e-6, relevance_prior="lognormal")
