"""The relevance surrogate's fixed noise: ``LocalGPExplainer(relevance_noise=...)``,
``make_relevance_surrogate(model, noise=...)``."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from gpytorch_explain.local import PRESETS, LocalGPExplainer
from gpytorch_explain.local import readout as readout_module
from gpytorch_explain.local import surrogate as surrogate_module
from gpytorch_explain.local.readout import RELEVANCE_SUBSAMPLE_FRACTION
from gpytorch_explain.local.surrogate import (
    bootstrap_relevances,
    fit_surrogate,
    make_relevance_surrogate,
    make_surrogate,
)


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
    """The preset's setting (logit link, interpolating surrogates, 8 subsampled relevance refits): at 50 calls for
    30 features the relevance orders the 27 effects like their true sizes and gives the 3 features without effect ~0."""
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


class _Refits(list):
    """(training inputs, normalised 1/l) of each refit; ``targets``: their training targets."""

    def __init__(self):
        super().__init__()
        self.targets: list[torch.Tensor] = []


def _capture_refits(monkeypatch):
    """Record the training inputs and the normalised 1/l of every refit that bootstrap_relevances makes."""
    seen = _Refits()
    original = surrogate_module.fit_surrogate

    def spy(model, *args, **kwargs):
        out = original(model, *args, **kwargs)
        if kwargs.get("final") is False:  # the refits (the explainer's full fits are final)
            inv = 1.0 / model.covar_module.base_kernel.lengthscale.detach().reshape(-1).numpy()
            seen.append((model.train_inputs[0].detach().clone(), inv / inv.sum()))
            seen.targets.append(model.train_targets.detach().clone())
        return out

    monkeypatch.setattr(surrogate_module, "fit_surrogate", spy)
    return seen


def test_subsampled_refits_keep_the_marked_rows_and_half_of_the_others(monkeypatch):
    U, y = _samples_with_a_stencil()
    model = make_relevance_surrogate(make_surrogate(U, y), noise=1e-6)
    fit_surrogate(model)
    keep = U.abs().amax(-1) <= 0.1  # the origin and its stencil: 5 rows
    seen = _capture_refits(monkeypatch)
    rel, notes = bootstrap_relevances(model, 6, np.random.RandomState(0), keep=keep, fraction=0.5)
    assert notes == [] and rel.shape == (6, 4) and len(seen) == 6
    np.testing.assert_allclose(rel.sum(1), 1.0, rtol=1e-12)
    rows = {tuple(r.tolist()) for r in U.numpy()}
    subsets = set()
    for (Ub, inv), r in zip(seen, rel, strict=True):
        np.testing.assert_allclose(r, inv, rtol=1e-12)  # each row is that refit's normalised 1/l
        got = [tuple(row.tolist()) for row in Ub.numpy()]
        assert len(set(got)) == len(got) == 5 + round(0.5 * 25)  # without replacement
        assert set(got) <= rows
        assert {tuple(row.tolist()) for row in U[keep].numpy()} <= set(got)  # every marked row, every time
        subsets.add(frozenset(got))
    assert len(subsets) > 1  # the others vary between refits
    # the classic bootstrap (no fraction) draws with replacement and may drop the marked rows
    seen.clear()
    bootstrap_relevances(model, 6, np.random.RandomState(0))
    dropped = [
        not {tuple(row.tolist()) for row in U[keep].numpy()} <= {tuple(r.tolist()) for r in Ub.numpy()}
        for Ub, _ in seen
    ]
    assert any(dropped) and all(len(Ub) == len(U) for Ub, _ in seen)


def _cold_refit_relevance(Ub: torch.Tensor, yb: torch.Tensor) -> np.ndarray:
    """An independent refit on one subsample: a fresh relevance surrogate (initial hyperparameters), 30 iterations."""
    fresh = make_relevance_surrogate(make_surrogate(Ub, yb), noise=1e-6)
    fit_surrogate(fresh, maxiter=30, final=False)
    inv = 1.0 / fresh.covar_module.base_kernel.lengthscale.detach().reshape(-1).numpy()
    return inv / inv.sum()


def test_subsampled_refits_start_cold_from_the_given_state(monkeypatch):
    U, y = _samples_with_a_stencil()
    model = make_relevance_surrogate(make_surrogate(U, y), noise=1e-6)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    fit_surrogate(model)
    fitted = {k: v.detach().clone() for k, v in model.state_dict().items()}
    keep = U.abs().amax(-1) <= 0.1
    seen = _capture_refits(monkeypatch)
    cold, _ = bootstrap_relevances(model, 4, np.random.RandomState(1), keep=keep, fraction=0.3, start=start)
    assert len(seen) == 4
    for (Ub, _), yb, row in zip(seen, seen.targets, cold, strict=True):
        assert len(Ub) == 5 + round(0.3 * 25)
        np.testing.assert_allclose(row, _cold_refit_relevance(Ub, yb), rtol=1e-8, atol=1e-10)
    # the same subsamples warm-started at the full fit end elsewhere (so the check above can fail)
    warm, _ = bootstrap_relevances(model, 4, np.random.RandomState(1), keep=keep, fraction=0.3)
    assert np.abs(warm - cold).max() > 1e-4
    for k, v in model.state_dict().items():  # the fitted model itself is left as it was
        assert torch.equal(v, fitted[k]), k


@pytest.mark.parametrize(
    "kwargs", [dict(fraction=0.0), dict(fraction=1.5), dict(fraction=0.5, keep=torch.zeros(3, dtype=torch.bool))]
)
def test_subsampling_arguments_are_checked(kwargs):
    U, y = _samples_with_a_stencil()
    model = make_surrogate(U, y)
    with pytest.raises(ValueError, match="fraction|keep"):
        bootstrap_relevances(model, 2, np.random.RandomState(0), **kwargs)


def test_the_explainer_subsamples_around_x_and_its_stencil_with_a_fixed_noise(monkeypatch):
    data = np.random.RandomState(0).randn(200, 4)
    f = lambda X: X @ np.array([1.0, -0.5, 0.25, 0.0]) + 0.1 * np.sin(X[:, 0])  # noqa: E731
    kw = dict(budget=24, seed=2, raw_samples=16, relevance_noise=1e-6, relevance_bootstrap=4)
    seen = _capture_refits(monkeypatch)
    ex = LocalGPExplainer(f, data, **kw)
    assert ex.stencil_kind == "central" and ex.stencil == 0.1
    res = ex.explain(data[1])
    ex_scale = data.std(0)  # interval 1: box half-width = one std
    U_all = (res.x_samples - res.x) / ex_scale
    near = np.abs(U_all).max(1) <= 0.1 + 1e-12  # x and its central stencil (8 rows for 4 features at 24 calls)
    assert near.sum() == 9
    assert len(seen) == 4
    for Ub, _ in seen:
        got = {tuple(np.round(r, 10)) for r in Ub.numpy()}
        assert {tuple(np.round(r, 10)) for r in U_all[near]} <= got
        assert len(got) == near.sum() + round(RELEVANCE_SUBSAMPLE_FRACTION * (~near).sum())
    np.testing.assert_allclose(res.relevance, np.mean([inv for _, inv in seen], 0), rtol=1e-10)
    for (Ub, inv), yb in zip(seen, seen.targets, strict=True):  # each refit starts cold
        np.testing.assert_allclose(inv, _cold_refit_relevance(Ub, yb), rtol=1e-8, atol=1e-10)
    assert res.relevance[3] < 0.01  # no effect
    again = LocalGPExplainer(f, data, **kw).explain(data[1])
    np.testing.assert_array_equal(res.relevance, again.relevance)
