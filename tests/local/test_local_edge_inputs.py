"""Edge inputs of ``LocalGPExplainer`` found by an audit (2026-11-29): each was a silent wrong answer, a late or
unhelpful error, or an unreported change of what the user passed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from gpytorch_explain.local import LocalGPExplainer, from_sklearn_classifier
from tests.helpers import NO_RELEVANCE


def test_a_single_level_categorical_keeps_xs_unseen_value_in_every_row():
    """Zero variance in the training data: never perturbed, so every row carries x's value even when the training
    data never takes it (before, all but x and the stencil rows were snapped to the training level, 7, and the
    surrogate mixed two functions: the slope of x1 came out 7.7 where it is x2 = 2)."""
    rng = np.random.RandomState(0)
    X = rng.randn(200, 3)
    X[:, 2] = 7.0
    x = X[1].copy()
    x[2] = 2.0
    with pytest.warns(UserWarning, match="never takes"):
        r = LocalGPExplainer(
            lambda Z: Z[:, 0] + Z[:, 1] * Z[:, 2], X, budget=15, seed=0, categorical_features=[2], **NO_RELEVANCE
        ).explain(x)
    assert np.all(r.x_samples[:, 2] == 2.0)
    truth = np.array([1.0, 2.0, 0.0])
    assert np.all(np.abs(r.gradient_mean - truth) <= 2 * r.gradient_std + 1e-9), (r.gradient_mean, r.gradient_std)
    assert r.relevance[2] == 0.0


def test_one_number_for_one_row_is_accepted():
    """A black box that squeezes its output returns a 0-d value for a 1-row call (the BO steps)."""
    calls = []

    def f(Z):
        calls.append(len(Z))
        return np.squeeze(Z[:, 0] - 2 * Z[:, 1])

    X = np.random.RandomState(1).randn(100, 3)
    r = LocalGPExplainer(f, X, budget=16, seed=0, **NO_RELEVANCE).explain(X[0])
    assert 1 in calls and sum(calls) == 16 and r.x_samples.shape == (16, 3)
    assert np.all(np.abs(r.gradient_mean - [1.0, -2.0, 0.0]) <= 2 * r.gradient_std + 1e-9)


@pytest.mark.parametrize("q", [4, 6])
def test_batches_leave_the_calls_kept_for_the_stencil_completion(q):
    """With ``q > 1`` the last acquisition batch stops where the completion's kept calls begin, so the completion
    gets all of them (before: 5 of 8 with q = 4)."""
    rng = np.random.RandomState(0)
    D = 14
    X = rng.randn(200, D)
    w = rng.randn(D)
    ex = LocalGPExplainer(lambda Z: np.tanh(Z @ w / 3) + 0.2 * Z[:, 0] ** 2, X, budget=40, q=q, seed=0, **NO_RELEVANCE)
    r = ex.explain(X[2])
    assert ex.stencil_kind == "forward" and ex._completion_calls > 0
    h = ex.stencil * ex.interval * ex.sigma
    steps = r.x_samples - X[2]
    backward = [
        i
        for i in range(1, len(steps))
        if np.count_nonzero(steps[i]) == 1 and np.isclose(steps[i].sum(), -h[np.flatnonzero(steps[i])[0]])
    ]
    assert len(backward) == ex._completion_calls == len(ex._backward)
    assert r.x_samples.shape[0] == 40


def test_an_int_class_index_that_is_also_another_columns_label_warns():
    rng = np.random.RandomState(0)
    X = rng.randn(100, 2)
    y = np.where(X[:, 0] > 0, 2, 1)
    m = LogisticRegression().fit(X, y)
    p = m.predict_proba(X[:3])
    with pytest.warns(UserWarning, match=r"column 1 of predict_proba .* Pass class_index=0"):
        f1 = from_sklearn_classifier(m, 1)
    np.testing.assert_allclose(f1(X[:3]), p[:, 1])  # an int is a column
    np.testing.assert_allclose(from_sklearn_classifier(m, 2)(X[:3]), p[:, 1])  # past the columns: the label 2
    np.testing.assert_allclose(from_sklearn_classifier(m, 1.0)(X[:3]), p[:, 0])  # a float can only be a label
    with pytest.raises(ValueError, match="out of range"):
        from_sklearn_classifier(m, 3)


def test_categorical_features_by_feature_name_and_negative_index():
    X = np.random.RandomState(0).randn(50, 3)
    X[:, 2] = np.arange(50) % 3
    f = lambda Z: Z.sum(1)  # noqa: E731
    named = LocalGPExplainer(f, X, categorical_features=["c"], feature_names=["a", "b", "c"])
    assert named.categorical_features == [2]
    assert LocalGPExplainer(f, X, categorical_features=[-1]).categorical_features == [2]
    with pytest.raises(IndexError, match="out of range"):
        LocalGPExplainer(f, X, categorical_features=[-4])
    with pytest.raises(ValueError, match="neither an index nor a column name"):
        LocalGPExplainer(f, X, categorical_features=["d"], feature_names=["a", "b", "c"])


def test_a_torch_function_given_numpy_gets_a_hint():
    X = np.random.RandomState(0).randn(100, 3)
    with pytest.raises(TypeError, match="input_type='torch'"):
        LocalGPExplainer(lambda Z: torch.sin(Z[:, 0]), X, budget=12, seed=0).explain(X[0])
    r = LocalGPExplainer(lambda Z: torch.sin(Z[:, 0]), X, budget=12, seed=0, input_type="torch", **NO_RELEVANCE)
    assert r.explain(X[0]).y_samples.shape == (12,)


def test_a_changed_or_unseen_baseline_is_reported():
    rng = np.random.RandomState(0)
    X = rng.randn(200, 4)
    X[:, 2] = 5.0
    X[:, 3] = rng.choice([0.0, 1.0, 2.0], 200)
    ex = LocalGPExplainer(
        lambda Z: np.sin(Z[:, 0]) + 2 * Z[:, 1] + Z[:, 3] * Z[:, 0] + Z[:, 2],
        X,
        budget=20,
        seed=0,
        categorical_features=[3],
        **NO_RELEVANCE,
    )
    x = X[0]
    r = ex.explain(x, baseline=np.array([x[0], x[1], 6.0, x[3]]))
    assert r.baseline[2] == 5.0 and r.integrated_gradients[2] == 0.0
    assert any(w.startswith("baseline: 1 feature(s) with zero variance") for w in r.warnings)
    r = ex.explain(x, baseline=np.array([x[0], x[1], 5.0, 1.5]))
    assert any("never takes for categorical feature(s) x3 (1.5)" in w for w in r.warnings)
    r = ex.explain(x, baseline=np.array([x[0], x[1], 5.0, 2.0]))
    assert not any(w.startswith("baseline") for w in r.warnings)


def test_a_wide_interval_and_a_constant_black_box_are_reported():
    X = np.random.RandomState(0).randn(100, 3)
    r = LocalGPExplainer(lambda Z: np.sin(Z[:, 0]) + 2 * Z[:, 1], X, budget=15, seed=0, interval=100.0, **NO_RELEVANCE)
    assert any(w.startswith("interval: the box x ± 100σ") for w in r.explain(X[0]).warnings)
    r = LocalGPExplainer(lambda Z: np.sin(Z[:, 0]) + 2 * Z[:, 1], X, budget=15, seed=0, **NO_RELEVANCE).explain(X[0])
    assert not any(w.startswith("interval") for w in r.warnings)
    r = LocalGPExplainer(lambda Z: np.full(len(Z), 3.0), X, budget=12, seed=0, **NO_RELEVANCE).explain(X[0])
    assert np.isnan(r.fidelity) and any(w.startswith("fidelity: NaN") for w in r.warnings)
    assert np.all(np.abs(r.gradient_mean) <= 2 * r.gradient_std + 1e-12)


def test_float32_modules_get_differences_over_the_steps_they_received():
    """Near an offset of 1e5 a float32 module rounds x ± h by percents of the step; the difference divided by the
    nominal h (2-4 % off on this exactly linear model) replaced the surrogate's correct slope."""
    off, sd = 1e5, 0.2
    X = off + sd * np.random.RandomState(0).randn(300, 4)
    w = torch.tensor([1.0, -2.0, 0.5, 0.0])

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.tensor(off, dtype=torch.float32))

        def forward(self, Z):
            return (Z - self.b) @ w

    explainer = LocalGPExplainer(Linear(), X, budget=25, seed=0, **NO_RELEVANCE)
    r = explainer.explain(X[0])
    assert explainer.stencil_kind == "central"  # 4 features at 25 calls
    np.testing.assert_allclose(r.gradient_mean, w.numpy(), rtol=0, atol=5e-3)


def test_columns_in_another_order_than_the_sklearn_model():
    """A DataFrame whose columns are the model's in another order: the black box reorders them by name. With
    input_type='numpy' (arrays read by position) the features would be mislabelled: an error."""
    pd = pytest.importorskip("pandas")
    from sklearn.linear_model import LinearRegression

    from gpytorch_explain.local import from_sklearn_regressor

    df = pd.DataFrame(np.random.RandomState(0).randn(200, 3), columns=["a", "b", "c"])
    model = LinearRegression().fit(df, df @ np.array([1.0, 2.0, 3.0]))
    train = df[["c", "a", "b"]]
    r = LocalGPExplainer(from_sklearn_regressor(model), train, budget=12, seed=0, **NO_RELEVANCE).explain(train.iloc[0])
    np.testing.assert_allclose(r.gradient_mean, [3.0, 1.0, 2.0], atol=1e-3)
    with pytest.raises(ValueError, match="reads its columns by position"):
        LocalGPExplainer(from_sklearn_regressor(model), train, budget=12, input_type="numpy")


def test_a_labelled_row_is_read_by_label_with_numpy_training_data():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(np.random.RandomState(0).randn(200, 3), columns=["a", "b", "c"])
    explainer = LocalGPExplainer(
        lambda Z: Z @ [1.0, 2.0, 3.0], df.to_numpy(), feature_names=["a", "b", "c"], budget=12, seed=0, **NO_RELEVANCE
    )
    r = explainer.explain(df.iloc[0][["c", "a", "b"]])
    np.testing.assert_array_equal(r.x, df.iloc[0].to_numpy())
    with pytest.raises(ValueError, match="not the feature names"):
        explainer.explain(pd.Series([0.1, 0.2, 0.3], index=["a", "b", "z"]))
    # a plain positional index, and arrays, stay positional
    np.testing.assert_array_equal(explainer._check_x(pd.Series([0.1, 0.2, 0.3])), [0.1, 0.2, 0.3])
