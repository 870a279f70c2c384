"""LocalGPExplainerAdapter: LocalGPExplainer's results, row by row, in the common ExplainerOutput convention."""

import numpy as np
import pytest

from gpytorch_explain import LocalGPExplainer
from gpytorch_explain.explainers import Explainer, LocalGPExplainerAdapter
from tests.helpers import NO_RELEVANCE

KW = dict(budget=14, seed=2, raw_samples=16, n_initial=4, acquisition="variance")
#: for the tests that read no relevance (tests/helpers.py)
FAST = KW | NO_RELEVANCE


def f(X):
    return 1.5 * X[:, 0] - X[:, 1] + 0.3 * X[:, 0] * X[:, 2]


@pytest.fixture(scope="module")
def data():
    return np.random.RandomState(0).randn(150, 3)


def test_integrated_gradients_rows_match_the_explainer(data):
    adapter = LocalGPExplainerAdapter(f, data, **FAST)
    assert isinstance(adapter, Explainer) and adapter.additive and adapter.name == "LocalGP"
    out = adapter.explain(data[:2])
    for i in range(2):
        ref = LocalGPExplainer(f, data, **FAST).explain(data[i])  # same seed: the same samples and surrogates
        np.testing.assert_allclose(out.contributions[i], ref.integrated_gradients, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out.std[i], ref.integrated_gradients_std, rtol=1e-10, atol=1e-12)
        diff = ref.x - ref.baseline
        np.testing.assert_allclose(out.weights[i] * diff, ref.integrated_gradients, rtol=1e-10, atol=1e-12)
    # IG is additive: the contributions add up to the surrogate's f(x) - f(b)
    r = adapter.results[0]
    fx, _ = r.predict(np.stack([r.x, r.baseline]))
    assert out.contributions[0].sum() == pytest.approx(fx[0] - fx[1], rel=1e-5, abs=1e-6)


def test_gradient_input_and_relevance_scores(data):
    gi = LocalGPExplainerAdapter(f, data, score="gradient_input", **FAST)
    out = gi.explain(data[3])  # one row
    r = gi.results[0]
    diff = r.x - r.baseline
    assert out.contributions.shape == (1, 3) and not gi.additive
    np.testing.assert_allclose(out.contributions[0], r.gradient_mean * diff)
    np.testing.assert_allclose(out.std[0], r.gradient_std * np.abs(diff))
    np.testing.assert_allclose(out.weights[0], r.gradient_mean)
    rel = LocalGPExplainerAdapter(f, data, score="relevance", **KW)
    out = rel.explain(data[3:4])
    assert out.std is None and not rel.additive
    np.testing.assert_allclose(out.weights[0], rel.results[0].relevance)
    np.testing.assert_allclose(out.contributions[0], rel.results[0].relevance * diff)


def test_fixed_baseline_and_bad_input(data):
    b = np.array([0.1, -0.2, 0.0])
    adapter = LocalGPExplainerAdapter(f, data, baseline=b, **FAST)
    adapter.explain(data[:1])
    np.testing.assert_array_equal(adapter.results[0].baseline, b)
    with pytest.raises(ValueError, match="score"):
        LocalGPExplainerAdapter(f, data, score="shap")
    with pytest.raises(ValueError, match=r"\(m, 3\)"):
        adapter.explain(np.zeros((2, 4)))
