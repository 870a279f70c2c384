"""Every acquisition of LocalGPExplainer, batches and the stopping rule."""

import numpy as np
import pytest

from gpytorch_explain.local import ACQUISITIONS, LocalGPExplainer
from tests.helpers import NO_RELEVANCE

A = np.array([1.0, -2.0, 0.5])


def black_box(X):
    return X @ A + 0.1 * np.sin(X[:, 1] * X[:, 2])


@pytest.fixture(scope="module")
def data():
    return np.random.RandomState(0).randn(300, 3)


@pytest.mark.parametrize("acquisition", ACQUISITIONS)
def test_every_acquisition_runs_with_batches(acquisition, data):
    # the defaults' relevance (SAAS, bagged) is deterministic under the seed: test_local_relevance_bootstrap.py
    kw = dict(acquisition=acquisition, budget=10, n_initial=3, q=3, seed=0, raw_samples=16, num_mc_points=32)
    res = LocalGPExplainer(black_box, data, **kw, **NO_RELEVANCE).explain(data[2])
    assert res.x_samples.shape == (10, 3)  # 1 + 3 initial, then 3 + 3, (the last batch cut to fit)
    assert np.isfinite(res.gradient_mean).all() and np.isfinite(res.gradient_std).all()
    assert len(np.unique(res.x_samples, axis=0)) >= 8
    # deterministic under the seed, for every acquisition and with batches
    again = LocalGPExplainer(black_box, data, **kw, **NO_RELEVANCE).explain(data[2])
    np.testing.assert_array_equal(again.x_samples, res.x_samples)
    np.testing.assert_array_equal(again.relevance, res.relevance)
    np.testing.assert_array_equal(again.gradient_mean, res.gradient_mean)


def test_stopping_rule_gives_fewer_rows(data):
    res = LocalGPExplainer(
        black_box,
        data,
        budget=40,
        n_initial=6,
        seed=0,
        raw_samples=16,
        acquisition="gradient",
        gradient_tol=0.5,
        **NO_RELEVANCE,
    ).explain(data[2])
    assert res.stopped_early and len(res.y_samples) < 40 and res.x_samples.shape[0] == len(res.y_samples)
    assert (res.gradient_std < 0.5).all()  # the returned surrogate is the one that met the rule
    assert len(res.y_samples) >= 7  # x + 6 initial points, then at least one check


def test_repeated_proposals_are_replaced_by_the_most_uncertain_point():
    # EI and PI re-propose the incumbent once the surrogate is sure of it (a bowl whose minimum is inside the box);
    # a repeated call of a deterministic black box is wasted, so the point of maximum posterior std is taken
    # instead and the result says so. Every sampled row is distinct.
    data = np.random.default_rng(0).normal(size=(200, 3))
    centre = data[0] + 0.3
    f = lambda X: ((X - centre) ** 2).sum(1)  # noqa: E731
    for acquisition in ("pi", "ei"):
        replaced = 0
        for seed in range(3):
            res = LocalGPExplainer(
                f, data, acquisition=acquisition, budget=25, seed=seed, raw_samples=16, stencil=None, **NO_RELEVANCE
            ).explain(data[0])
            assert len(np.unique(res.x_samples, axis=0)) == 25, (acquisition, seed)
            replaced += sum("proposed a point already sampled" in w for w in res.warnings)
        assert replaced >= 1, acquisition


def test_all_categorical_space_is_covered_before_rows_repeat():
    # two categorical columns with 2 and 3 seen values: 6 possible rows. The acquisition scores only a few random
    # combinations and used to re-propose sampled rows (one combination was never tried); now a repeated proposal
    # is replaced by an unsampled combination, and only once all 6 have been sampled do rows repeat (said so).
    rs = np.random.RandomState(0)
    data = np.c_[rs.randint(0, 2, 50), rs.randint(0, 3, 50)].astype(float)

    def f(X):
        return 2.0 * X[:, 0] + np.sin(X[:, 1])

    kw = dict(categorical_features=[0, 1], raw_samples=16, **NO_RELEVANCE)
    res = LocalGPExplainer(f, data, budget=10, seed=0, **kw).explain(data[0])
    assert res.x_samples.shape == (10, 2)  # the exact budget
    np.testing.assert_array_equal(res.x_samples[0], data[0])
    assert len(np.unique(res.x_samples[:6], axis=0)) == 6  # every combination before any repeat
    assert sum("proposed a point already sampled" in w for w in res.warnings) == 1
    exhausted = [w for w in res.warnings if w.startswith("repeated rows")]
    assert len(exhausted) == 1 and "all 6 combinations" in exhausted[0] and "4 row(s)" in exhausted[0]
    # within the number of combinations: all rows distinct, no "repeated rows" warning
    res = LocalGPExplainer(f, data, budget=6, seed=1, **kw).explain(data[0])
    assert len(np.unique(res.x_samples, axis=0)) == 6
    assert not any(w.startswith("repeated rows") for w in res.warnings)
