"""The bagged relevance (``relevance_bootstrap``): refits on bootstrap resamples, their mean and std."""

import math

import numpy as np
import pytest
import torch

from gpytorch_explain.local import LocalGPExplainer
from gpytorch_explain.local.surrogate import (
    bootstrap_relevances,
    fit_surrogate,
    make_relevance_surrogate,
    make_surrogate,
)

A = np.array([2.0, -1.0, 0.5, 0.0])  # feature 3: no effect


def black_box(X):
    return X @ A + np.sin(X[:, 0])


@pytest.fixture(scope="module")
def data():
    return np.random.RandomState(0).randn(200, 4)


def _fitted_relevance_surrogate():
    g = torch.Generator().manual_seed(5)
    U = torch.rand(30, 3, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.sin(2 * U[:, 0]) - U[:, 1] + 0.3 * U[:, 0] * U[:, 1]
    y = (y - y.mean()) / y.std()
    model = make_relevance_surrogate(make_surrogate(U, y))
    fit_surrogate(model)
    return model, U, y


def test_each_row_is_a_refit_on_its_resample_from_the_full_fit():
    """Rebuilt independently: a fresh SAAS surrogate on the resampled rows, the full fit's hyperparameters loaded,
    the same L-BFGS-B budget; its normalised 1/l is the row."""
    model, U, y = _fitted_relevance_surrogate()
    rows, messages = bootstrap_relevances(model, 3, np.random.RandomState(7), maxiter=20)
    assert rows.shape == (3, 3) and not messages
    rng = np.random.RandomState(7)
    start = {k: v for k, v in model.state_dict().items() if not k.startswith("train_")}
    for row in rows:
        idx = torch.as_tensor(rng.randint(0, 30, size=30))
        fresh = make_relevance_surrogate(make_surrogate(U[idx], y[idx]))
        fresh.load_state_dict(start, strict=False)
        fit_surrogate(fresh, maxiter=20, final=False)
        inv = 1.0 / fresh.covar_module.base_kernel.lengthscale.detach().reshape(-1).numpy()
        np.testing.assert_allclose(row, inv / inv.sum(), rtol=1e-6, atol=1e-9)
    # the resamples differ, so do the refits; the full fit is not touched
    assert np.ptp(rows, axis=0).max() > 1e-4
    assert torch.equal(model.train_inputs[0], U)


def test_no_bootstrap_is_the_single_fit_and_bagging_changes_only_the_relevance(data):
    kw = dict(budget=24, seed=2, raw_samples=16)
    single = LocalGPExplainer(black_box, data, relevance_bootstrap=0, **kw).explain(data[3])
    bagged = LocalGPExplainer(black_box, data, relevance_bootstrap=6, **kw).explain(data[3])
    # B = 0: the single SAAS fit's normalised 1/l (lengthscales back in box units), std 0
    inv = 1.0 / (single.lengthscales / (1.0 * data.std(0)))
    np.testing.assert_allclose(single.relevance, inv / inv.sum(), rtol=1e-10)
    np.testing.assert_array_equal(single.relevance_std, np.zeros(4))
    # the samples, the full fit and every other read-out are the same
    np.testing.assert_array_equal(single.x_samples, bagged.x_samples)
    np.testing.assert_array_equal(single.lengthscales, bagged.lengthscales)
    np.testing.assert_array_equal(single.gradient_mean, bagged.gradient_mean)
    np.testing.assert_array_equal(single.integrated_gradients, bagged.integrated_gradients)
    assert math.isclose(bagged.relevance.sum(), 1.0) and (bagged.relevance >= 0).all()
    assert (bagged.relevance_std[:3] > 0).all() and bagged.relevance_std.max() < 0.2
    # the no-effect feature stays at ≈ 0 in every refit
    assert bagged.relevance[3] < 0.01 and bagged.relevance_std[3] < 0.01
    assert np.argsort(-bagged.relevance)[0] == 0
    np.testing.assert_allclose(bagged.relevance, single.relevance, atol=0.1)


def test_bagged_relevance_is_deterministic_and_zero_for_zero_variance_features(data):
    X = data.copy()
    X[:, 2] = 1.5  # zero variance: never perturbed
    kw = dict(budget=16, seed=9, raw_samples=16, relevance_bootstrap=4)
    r1 = LocalGPExplainer(black_box, X, **kw).explain(X[0])
    r2 = LocalGPExplainer(black_box, X, **kw).explain(X[0])
    np.testing.assert_array_equal(r1.relevance, r2.relevance)
    np.testing.assert_array_equal(r1.relevance_std, r2.relevance_std)
    assert r1.relevance[2] == 0.0 and r1.relevance_std[2] == 0.0


def test_the_lognormal_relevance_is_bagged_too(data):
    kw = dict(budget=16, seed=1, raw_samples=16, relevance_prior="lognormal")
    single = LocalGPExplainer(black_box, data, relevance_bootstrap=0, **kw).explain(data[0])
    bagged = LocalGPExplainer(black_box, data, relevance_bootstrap=4, **kw).explain(data[0])
    assert math.isclose(bagged.relevance.sum(), 1.0) and (bagged.relevance_std > 0).all()
    assert not np.array_equal(single.relevance, bagged.relevance)
    np.testing.assert_allclose(bagged.relevance, single.relevance, atol=0.1)


def test_the_table_and_the_cli_csv_carry_the_relevance_std(data):
    pytest.importorskip("pandas")
    res = LocalGPExplainer(black_box, data, budget=14, seed=0, raw_samples=16, relevance_bootstrap=3).explain(data[1])
    frame = res.to_frame()
    np.testing.assert_array_equal(frame["relevance_std"].to_numpy(), res.relevance_std)
    np.testing.assert_array_equal(frame["relevance"].to_numpy(), res.relevance)
    # it is the bootstrap spread, not a posterior std: the summary's "±" columns are the gradient's and IG's only
    assert "relevance ±" not in res.summary()


@pytest.mark.parametrize(
    "value, error", [(-1, ValueError), (True, TypeError), (2.5, TypeError), (np.float64(3.0), TypeError)]
)
def test_bad_relevance_bootstrap(data, value, error):
    with pytest.raises(error, match="relevance_bootstrap"):
        LocalGPExplainer(black_box, data, relevance_bootstrap=value)
