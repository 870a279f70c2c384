"""LocalGPExplainer's input checks: each bad argument is a clear error before any black-box call, never a silent
wrong answer (an input audit of the explainer, its helpers and its result)."""

import warnings

import numpy as np
import pytest

from gpytorch_explain.local import LocalGPExplainer, from_sklearn_classifier, from_sklearn_regressor
from tests.helpers import NO_RELEVANCE

A = np.array([2.0, -1.0, 0.5])


def f(X):
    return X @ A


@pytest.fixture(scope="module")
def data():
    return np.random.RandomState(0).randn(60, 3)


class Counting:
    """A black box that counts its rows (so a check can show it ran before any call)."""

    def __init__(self, fn=f):
        self.fn, self.rows = fn, 0

    def __call__(self, X):
        self.rows += len(X)
        return self.fn(X)


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(stencil=True), TypeError, "stencil must be 'auto', None or a half-width"),
        (dict(linear_trend="no"), TypeError, "linear_trend must be True or False"),
        (dict(progress=1), TypeError, "progress must be True or False"),
        (dict(raw_samples=1.7), TypeError, "raw_samples must be an integer"),
        (dict(raw_samples=0), ValueError, "raw_samples must be >= 2"),  # >= num_restarts (2 by default)
        (dict(num_restarts=0), ValueError, "num_restarts must be >= 1"),
        (dict(num_threads=1.5), TypeError, "num_threads must be an integer"),
        (dict(num_threads=0), ValueError, "num_threads must be >= 1"),
        (dict(num_mc_points=0), ValueError, "num_mc_points must be >= 1"),
        (dict(final_maxiter=-5), ValueError, "final_maxiter must be >= 1"),
        (dict(refit_maxiter=0), ValueError, "refit_maxiter must be >= 1"),
        (dict(refit_growth=0.5), ValueError, "refit_growth must be a number >= 1"),
        (dict(num_categorical_candidates=0), ValueError, "num_categorical_candidates must be >= 1"),
        (dict(jitter=float("nan")), ValueError, "jitter must be a number >= 0"),
        (dict(exploration_weight=-1.0), ValueError, "exploration_weight must be a number >= 0"),
        (dict(interval="1"), TypeError, "interval must be a real number"),
        (dict(interval=None), TypeError, "interval must be a real number"),
        (dict(interval=0.0), ValueError, "interval must be a positive number"),
        (dict(lengthscale_prior_scale=float("inf")), ValueError, "lengthscale_prior_scale must be a positive"),
        (dict(seed=-1), ValueError, r"seed must be None or an integer in \[0, 2\*\*32\)"),
        (dict(seed=2**32), ValueError, "seed must be None or an integer"),
        (dict(seed=1.5), TypeError, "seed must be an integer"),
        (dict(seed=np.random.default_rng(0)), TypeError, "seed must be an integer"),
        (dict(feature_names="abc"), TypeError, "feature_names must be a sequence of names"),
        (dict(feature_names=["a", "a", "b"]), ValueError, r"feature_names has duplicates: \['a'\]"),
        (dict(interval=1e300), ValueError, "overflow"),
    ],
)
def test_bad_settings_are_named_before_any_call(data, kw, exc, match):
    bb = Counting()
    with pytest.raises(exc, match=match):
        LocalGPExplainer(bb, data * (1e10 if kw.get("interval") == 1e300 else 1.0), **kw)
    assert bb.rows == 0


def test_good_settings_of_every_numeric_type_pass(data):
    ex = LocalGPExplainer(f, data, seed=np.uint32(7), interval=np.float32(0.5), jitter=0, num_threads=np.int64(1))
    assert (ex.seed, ex.interval, ex.jitter, ex.num_threads) == (7, 0.5, 0.0, 1)
    assert LocalGPExplainer(f, data, seed=2**32 - 1, stencil=0.1).stencil == 0.1


def test_complex_data_and_instances_are_errors(data):
    with pytest.raises(ValueError, match="training_data has complex values"):
        LocalGPExplainer(f, data + 1j)
    with pytest.raises(ValueError, match="x has complex values"):
        LocalGPExplainer(f, data, budget=12).explain(data[0] + 0j)


def test_a_box_below_float64_resolution_is_an_error(data):
    bb = Counting()
    ex = LocalGPExplainer(bb, data, interval=1e-300, budget=12)
    with pytest.raises(ValueError, match=r"below the resolution of the black box's torch\.float64 inputs at x"):
        ex.explain(data[0])
    assert bb.rows == 0


@pytest.mark.parametrize("unit", [1e160, 1e-170])
def test_outputs_near_the_float64_limits_are_explained(data, unit):
    """The outputs are standardised on y / max|y|: unit * f gives unit * f's gradient (it overflowed to NaN, or
    underflowed to a constant with uniform relevance)."""
    kw = dict(budget=14, seed=0)
    ref = LocalGPExplainer(f, data, **kw).explain(data[1])
    res = LocalGPExplainer(lambda X: unit * f(X), data, **kw).explain(data[1])
    np.testing.assert_allclose(res.gradient_mean / unit, ref.gradient_mean, rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(res.relevance, ref.relevance, atol=0.05)  # the BO paths part at round-off
    np.testing.assert_allclose(res.gradient_mean / unit, A, atol=3 * ref.gradient_std.max() + 1e-6)


def test_training_data_whose_std_overflows_is_an_error():
    with pytest.raises(ValueError, match="overflows float64"):
        LocalGPExplainer(f, np.random.RandomState(0).randn(20, 3) * 1e307)


def test_result_predict_checks_its_rows(data):
    res = LocalGPExplainer(f, data, budget=12, seed=0, **NO_RELEVANCE).explain(data[0])
    mean, std = res.predict(data[:2])
    assert mean.shape == std.shape == (2,)
    np.testing.assert_allclose(res.predict(data[0])[0], mean[:1])  # one row as (D,)
    with pytest.raises(ValueError, match="NaN or infinite"):
        res.predict(np.array([[0.0, np.nan, 0.0]]))
    with pytest.raises(ValueError, match=r"must be \(m, 3\)"):
        res.predict(np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match=r"must be \(m, 3\)"):
        res.predict(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="top_k must be None or a positive integer"):
        res.summary(top_k=-1)
    with pytest.raises(ValueError, match="top_k must be None or a positive integer"):
        res.summary(top_k=0)
    assert len(res.summary(top_k=2).splitlines()) == 4 + bool(res.warnings)


def test_an_unseen_category_does_not_leak_into_the_forward_stencil():
    """x's category is unseen: the stencil rows keep it, so each forward difference moves one continuous feature
    (they used to snap it to the nearest seen value, and the category's jump of 10 entered every difference)."""
    rs = np.random.RandomState(1)
    C = np.c_[rs.randn(80), rs.randint(0, 3, 80), rs.randn(80)]

    def g(X):
        return 2 * X[:, 0] + 0.5 * X[:, 2] + 10 * X[:, 1]

    x = np.array([0.3, 5.0, -0.2])
    ex = LocalGPExplainer(
        g, C, categorical_features=[1], stencil=0.1, stencil_kind="forward", budget=12, seed=0, **NO_RELEVANCE
    )
    with pytest.warns(UserWarning, match="never takes"):
        res = ex.explain(x)
    np.testing.assert_array_equal(res.x_samples[:3, 1], 5.0)
    back = sorted(ex._backward.values())  # the stencil's completion rows x - h e_j keep x's category too
    np.testing.assert_array_equal(res.x_samples[back, 1], 5.0)
    others = [i for i in range(3, len(res.x_samples)) if i not in back]
    assert set(res.x_samples[others, 1]) <= {0.0, 1.0, 2.0}
    for j, slope in ((0, 2.0), (2, 0.5)):
        assert abs(res.gradient_mean[j] - slope) <= 2 * res.gradient_std[j] + 1e-6
        assert res.gradient_std[j] < 0.1, res.gradient_std  # was ~300: the category's jump read as a slope
    assert not any("stencil check" in m for m in res.warnings)


def test_categorical_baseline_is_a_seen_value():
    rs = np.random.RandomState(2)
    C = np.c_[rs.randn(90), rs.choice([0.0, 1.0, 7.0], size=90, p=[0.2, 0.7, 0.1])]
    res = LocalGPExplainer(
        lambda X: X[:, 0] + X[:, 1], C, categorical_features=[1], budget=12, seed=0, **NO_RELEVANCE
    ).explain(np.array([0.1, 7.0]))
    assert res.baseline[1] == 1.0  # the most frequent value, not the mean of the codes (1.4)
    np.testing.assert_allclose(res.baseline[0], np.clip(C[:, 0].mean(), 0.1 - C[:, 0].std(), 0.1 + C[:, 0].std()))


# ------------------------------------------------------------------------------ scikit-learn helpers
def test_regressor_helper_rejects_classifiers_clusterers_and_multi_output():
    sklearn = pytest.importorskip("sklearn")
    from sklearn.cluster import KMeans
    from sklearn.linear_model import LinearRegression, LogisticRegression

    assert sklearn
    X = np.random.RandomState(0).randn(40, 2)
    with pytest.raises(TypeError, match="from_sklearn_classifier"):
        from_sklearn_regressor(LogisticRegression().fit(X, X[:, 0] > 0))
    with pytest.raises(TypeError, match="needs a regressor, got a clusterer"):
        from_sklearn_regressor(KMeans(2, n_init=2, random_state=0).fit(X))
    multi = from_sklearn_regressor(LinearRegression().fit(X, np.c_[X[:, 0], X[:, 1]]))
    with pytest.raises(ValueError, match="multi-output regressor needs a predict_fn that picks one output"):
        multi(X[:3])
    one = from_sklearn_regressor(LinearRegression().fit(X, X[:, :1]))  # (n, 1) targets: one output
    assert one(X[:3]).shape == (3,)


def test_classifier_helper_takes_a_label_or_an_index():
    pytest.importorskip("sklearn")
    from sklearn.linear_model import LogisticRegression

    X = np.random.RandomState(0).randn(40, 2)
    clf = LogisticRegression().fit(X, np.where(X[:, 0] > 0, "pos", "neg"))
    np.testing.assert_allclose(from_sklearn_classifier(clf, "pos")(X[:3]), clf.predict_proba(X[:3])[:, 1])
    np.testing.assert_allclose(from_sklearn_classifier(clf, "neg")(X[:3]), clf.predict_proba(X[:3])[:, 0])
    with pytest.raises(TypeError, match=r"one of the classifier's labels \['neg', 'pos'\], got 'maybe'"):
        from_sklearn_classifier(clf, "maybe")
    with pytest.raises(TypeError, match="class_index must be"):
        from_sklearn_classifier(clf, 1.7)


def test_a_narrow_box_far_from_zero_is_fine_in_float64():
    """Data around 1e5 with std 1e-4: the box spans ~1e7 float64 steps, so it is explained (not refused)."""
    X = 1e5 + 1e-4 * np.random.RandomState(0).randn(300, 3)
    res = LocalGPExplainer(lambda Z: ((Z - 1e5) / 1e-4) @ A, X, budget=14, seed=0, **NO_RELEVANCE).explain(X[0])
    np.testing.assert_allclose(res.gradient_mean * 1e-4, A, atol=3 * (res.gradient_std * 1e-4).max() + 1e-6)


def test_a_box_below_float32_resolution_names_float32():
    torch = pytest.importorskip("torch")
    module = torch.nn.Linear(3, 1).float()
    X = 1e5 + 1e-4 * np.random.RandomState(0).randn(300, 3)  # 1e-4 is below float32's step at 1e5 (0.0078)
    with pytest.raises(ValueError, match=r"resolution of the black box's torch\.float32 inputs"):
        LocalGPExplainer(module, X, budget=14).explain(X[0])  # a float32 module gets float32 rows


def test_a_baseline_outside_the_box_is_warned(data):
    ex = LocalGPExplainer(f, data, budget=12, seed=0, **NO_RELEVANCE)
    x = data[0]
    inside = ex.explain(x, baseline=x - 0.5 * data.std(0))
    assert not any(m.startswith("baseline:") for m in inside.warnings)
    outside = ex.explain(x, baseline=x - 3 * data.std(0) * np.array([1, 0, 0]))
    (message,) = [m for m in outside.warnings if m.startswith("baseline:")]
    assert "outside the sampled box x ± 1σ for 1 feature(s) (x0; up to 3 box half-widths" in message


def test_a_feature_varying_below_the_resolution_threshold_is_named_in_a_warning():
    # std 9e-4 around 1e9 (relative 1e-12): treated as constant, which must not be silent
    X = np.random.default_rng(0).normal(size=(100, 2))
    X[:, 0] = 1e9 + 9e-4 * X[:, 0]
    with pytest.warns(UserWarning, match=r"x0 \(std 0.000\d+ at \|x\| up to 1e\+09\).*treated as constant"):
        ex = LocalGPExplainer(lambda Z: Z[:, 1], X, budget=20)
    assert list(ex.active) == [1]
    # an exactly constant feature is the documented case and warns nothing
    X[:, 0] = 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LocalGPExplainer(lambda Z: Z[:, 1], X, budget=20)
