"""LocalGPExplainer's contract on black boxes with known local structure."""

import warnings

import numpy as np
import pytest
import torch

from gpytorch_explain.local import LocalGPExplainer, from_sklearn_classifier, from_sklearn_regressor
from tests.helpers import NO_RELEVANCE

A = np.array([1.0, -2.0, 0.5, 0.0, 0.0, 0.0])  # features 3-5 have no effect


def black_box(X):
    return X @ A + 0.1 * np.sin(X[:, 1] * X[:, 2])


def true_gradient(x):
    g = A.copy()
    g[1] += 0.1 * np.cos(x[1] * x[2]) * x[2]
    g[2] += 0.1 * np.cos(x[1] * x[2]) * x[1]
    return g


@pytest.fixture(scope="module")
def data():
    return np.random.RandomState(0).randn(300, 6)


@pytest.fixture(scope="module")
def result(data):
    return LocalGPExplainer(black_box, data, acquisition="gradient", budget=30, seed=1, interval=0.5).explain(data[0])


def test_contract_shapes_and_exact_budget(result, data):
    D = data.shape[1]
    for name in ("relevance", "gradient_mean", "gradient_std", "integrated_gradients", "integrated_gradients_std"):
        arr = getattr(result, name)
        assert isinstance(arr, np.ndarray) and arr.shape == (D,), name
    assert result.x_samples.shape == (30, D) and result.y_samples.shape == (30,)
    np.testing.assert_array_equal(result.x_samples[0], data[0])
    np.testing.assert_allclose(result.y_samples, black_box(result.x_samples))
    assert result.relevance.sum() == pytest.approx(1.0) and (result.relevance >= 0).all()
    lo, hi = data[0] - 0.5 * data.std(0), data[0] + 0.5 * data.std(0)
    assert ((result.x_samples >= lo - 1e-9) & (result.x_samples <= hi + 1e-9)).all()
    assert 0.9 < result.fidelity <= 1.0


def test_irrelevant_features_and_true_gradient(result, data):
    rel, g, s = result.relevance, result.gradient_mean, result.gradient_std
    assert rel[3:].max() < 0.5 * rel[:3].min()
    assert rel[3:].sum() < 0.2
    assert (np.abs(g[3:]) <= 2 * s[3:]).all()
    inside = np.abs(g - true_gradient(data[0])) <= 2 * s
    assert inside.sum() >= 5, (g, s, true_gradient(data[0]))


def test_deterministic_under_seed_and_varies_without(data):
    kw = dict(budget=12, raw_samples=16, acquisition="lcb", n_initial=4)
    r1 = LocalGPExplainer(black_box, data, seed=3, **kw).explain(data[1])
    r2 = LocalGPExplainer(black_box, data, seed=3, **kw).explain(torch.as_tensor(data[1]))
    np.testing.assert_array_equal(r1.x_samples, r2.x_samples)
    np.testing.assert_array_equal(r1.gradient_mean, r2.gradient_mean)
    np.testing.assert_array_equal(r1.relevance, r2.relevance)
    r3 = LocalGPExplainer(black_box, data, seed=4, **kw).explain(data[1])
    assert not np.array_equal(r1.x_samples, r3.x_samples)


def test_categorical_and_zero_variance_features(data):
    rs = np.random.RandomState(1)
    X = data[:, :4].copy()
    X[:, 1] = rs.choice([0.0, 1.0, 5.0], size=len(X))  # categorical
    X[:, 3] = 7.0  # zero variance

    def f(Z):
        return Z[:, 0] + 0.5 * Z[:, 1] + Z[:, 2] ** 2 + 100.0 * (Z[:, 3] - 7.0)

    res = LocalGPExplainer(
        f, X, categorical_features=[1], budget=16, seed=0, raw_samples=16, feature_names=["a", "cat", "c", "const"]
    ).explain(X[0])
    assert set(np.unique(res.x_samples[:, 1])) <= {0.0, 1.0, 5.0}
    assert len(np.unique(res.x_samples[:, 1])) >= 2
    assert (res.x_samples[:, 3] == 7.0).all()
    assert res.relevance[3] == 0.0 and res.gradient_mean[3] == 0.0 and res.gradient_std[3] == 0.0
    assert res.integrated_gradients[3] == 0.0 and res.integrated_gradients_std[3] == 0.0
    assert np.isfinite(res.relevance).all() and res.relevance.sum() == pytest.approx(1.0)
    text = res.summary()
    assert "const" in text and "± 1 std" in text


def test_bad_inputs(data):
    with pytest.raises(ValueError, match="shape"):
        LocalGPExplainer(lambda X: np.zeros((len(X), 2)), data, budget=12).explain(data[0])
    with pytest.raises(ValueError, match="NaN or infinite"):
        LocalGPExplainer(lambda X: np.full(len(X), np.nan), data, budget=12).explain(data[0])
    with pytest.raises(ValueError, match="NaN or infinite"):
        LocalGPExplainer(lambda X: np.where(X[:, 0] > 0, np.inf, 0.0), data, budget=12).explain(data[0])
    ex = LocalGPExplainer(black_box, data, budget=12)
    with pytest.raises(ValueError, match="shape \\(6,\\)"):
        ex.explain(data[0, :4])
    with pytest.raises(ValueError, match="NaN"):
        ex.explain(np.full(6, np.nan))
    with pytest.raises(IndexError, match="out of range"):
        LocalGPExplainer(black_box, data, categorical_features=[6])
    with pytest.raises(ValueError, match="initial design"):
        LocalGPExplainer(black_box, data, budget=5, n_initial=4)
    with pytest.raises(ValueError, match="initial design"):
        LocalGPExplainer(black_box, data, budget=2)
    with pytest.raises(ValueError, match="Unknown acquisition"):
        LocalGPExplainer(black_box, data, acquisition="ucb")
    with pytest.raises(ValueError, match="zero variance"):
        LocalGPExplainer(black_box, np.ones((10, 6)))
    with pytest.raises(TypeError, match="callable"):
        LocalGPExplainer(3.0, data)
    with pytest.raises(TypeError, match="predict_proba"):
        from_sklearn_classifier(object())


def test_integer_arguments_must_be_integers(data):
    for kw, exc, match in [
        (dict(budget=12.9), TypeError, r"budget must be an integer.*12\.9"),
        (dict(budget="12"), TypeError, r"budget must be an integer.*'12'"),
        (dict(budget=True), TypeError, r"budget must be an integer.*True"),
        (dict(budget=12.0), TypeError, r"budget must be an integer"),
        (dict(q=2.7), TypeError, r"q must be an integer.*2\.7"),
        (dict(q=np.bool_(True)), TypeError, r"q must be an integer"),
        (dict(q=0), ValueError, r"q must be >= 1, got 0"),
        (dict(n_initial=3.0), TypeError, r"n_initial must be an integer.*3\.0"),
        (dict(n_initial=0), ValueError, r"n_initial must be >= 1, got 0"),
    ]:
        with pytest.raises(exc, match=match):
            LocalGPExplainer(black_box, data, **kw)
    ex = LocalGPExplainer(black_box, data, budget=np.int64(12), q=np.int32(2), n_initial=np.uint8(3))
    assert (ex.budget, ex.q, ex.n_initial) == (12, 2, 3) and type(ex.budget) is int


def test_gradient_tol_must_be_positive_and_finite(data):
    for tol in (0, 0.0, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="gradient_tol must be None or a positive finite number"):
            LocalGPExplainer(black_box, data, gradient_tol=tol)
    for tol in (True, "0.1"):
        with pytest.raises(TypeError, match="gradient_tol"):
            LocalGPExplainer(black_box, data, gradient_tol=tol)
    assert LocalGPExplainer(black_box, data, gradient_tol=np.float32(0.5)).gradient_tol == pytest.approx(0.5)
    assert LocalGPExplainer(black_box, data, gradient_tol=None).gradient_tol is None


def test_baseline_of_the_wrong_shape_is_named():
    calls = []

    def f(X):
        calls.append(len(X))
        return X.sum(1)

    data3 = np.random.RandomState(0).randn(50, 3)
    ex = LocalGPExplainer(f, data3, budget=10, raw_samples=16)
    with pytest.raises(ValueError, match=r"baseline must be one instance of shape \(3,\), got \(2,\)"):
        ex.explain(data3[0], baseline=np.zeros(2))
    with pytest.raises(ValueError, match="baseline contains NaN"):
        ex.explain(data3[0], baseline=np.full(3, np.nan))
    assert calls == []  # checked before the black box is called


def test_complex_output_is_an_error(data):
    from gpytorch_explain.local import BlackBox

    for out in (lambda X: X[:, 0] + 0j, lambda X: torch.as_tensor(X[:, 0]) * (1 + 1j), lambda X: [1j] * len(X)):
        with pytest.raises(ValueError, match="complex values"):
            BlackBox(out, 6)(data[:3])
    with pytest.raises(ValueError, match="complex values"):
        LocalGPExplainer(lambda X: X[:, 0] * (1 + 0.5j), data, budget=12).explain(data[0])


def test_a_gp_model_as_black_box_gets_a_hint(data):
    import gpytorch

    from gpytorch_explain.local import BlackBox

    def distribution(X):
        return gpytorch.distributions.MultivariateNormal(X[:, 0], torch.eye(len(X), dtype=X.dtype))

    with pytest.raises(TypeError, match=r"got MultivariateNormal\. For a GPyTorch.*model\(X\)\.mean"):
        BlackBox(distribution, 6, input_type="torch")(data[:3])


def test_unseen_categorical_value_of_x_warns():
    rs = np.random.RandomState(2)
    X = np.c_[rs.randn(100), rs.choice([0.5, 1.5, 4.25], size=100)]
    x = np.array([0.1, 2.0])  # 2.0 is not among the seen values of "kind"

    def f(Z):
        return Z[:, 0] + Z[:, 1] ** 2

    ex = LocalGPExplainer(
        f, X, categorical_features=[1], budget=8, seed=0, raw_samples=16, feature_names=["a", "kind"], **NO_RELEVANCE
    )
    with pytest.warns(UserWarning, match=r"'kind' \(index 1\) has the value 2, which training_data never takes"):
        res = ex.explain(x)
    np.testing.assert_array_equal(res.x_samples[0], x)
    k = 1 + {"central": 2, "forward": 1}[ex.stencil_kind] if ex.stencil is not None else 1
    assert k > 1  # the stencil rows move the continuous feature only, so they keep x's unseen category
    np.testing.assert_array_equal(res.x_samples[1:k, 1], 2.0)
    assert set(res.x_samples[k:, 1]) <= {0.5, 1.5, 4.25}
    assert len(res.y_samples) == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        ex._warn_unseen_categories(np.array([0.1, 1.5]))  # a seen value: no warning


def test_sklearn_helpers_and_torch_module(data):
    from sklearn.linear_model import LinearRegression, LogisticRegression

    X = data[:, :3]
    kw = dict(budget=10, n_initial=4, seed=0, raw_samples=16, **NO_RELEVANCE)
    reg = LinearRegression().fit(X, X @ [1.0, 2.0, 0.0])
    res = LocalGPExplainer(from_sklearn_regressor(reg), X, **kw).explain(X[0])
    assert res.x_samples.shape == (10, 3)
    clf = LogisticRegression().fit(X, X[:, 0] > 0)
    res = LocalGPExplainer(from_sklearn_classifier(clf, 1), X, **kw).explain(X[0])
    assert ((res.y_samples >= 0) & (res.y_samples <= 1)).all()
    with pytest.raises(ValueError, match="class_index"):
        from_sklearn_classifier(clf, 2)
    # logit output: for a binary logistic regression it is exactly the decision function
    np.testing.assert_allclose(from_sklearn_classifier(clf, 1, output="logit")(X), clf.decision_function(X), atol=1e-8)
    np.testing.assert_allclose(from_sklearn_classifier(clf, 0, output="logit")(X), -clf.decision_function(X), atol=1e-8)
    with pytest.raises(ValueError, match="output"):
        from_sklearn_classifier(clf, 1, output="log-odds")
    seen = []

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)

        def forward(self, z):
            seen.append(type(z))
            return self.lin(z)

    res = LocalGPExplainer(Net(), X, **kw).explain(X[0])
    assert seen and all(t is torch.Tensor for t in seen) and res.y_samples.shape == (10,)


def test_float32_module_x_samples_are_the_rows_it_received(data):
    received = []

    class Net32(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1).float()

        def forward(self, z):
            assert z.dtype == torch.float32
            received.append(z.detach().clone())
            return self.lin(z)

    X = data[:, :3] * 1.1
    res = LocalGPExplainer(Net32(), X, budget=10, n_initial=4, seed=0, raw_samples=16, **NO_RELEVANCE).explain(X[0])
    rows = torch.cat(received).double().numpy()
    assert res.x_samples.dtype == np.float64 and res.x_samples.shape == (10, 3)
    np.testing.assert_array_equal(res.x_samples, rows)  # exactly what the module got, in order
    np.testing.assert_array_equal(res.x_samples[0], X[0].astype(np.float32).astype(np.float64))  # row 0 is x
    assert np.abs(res.x_samples[0] - X[0]).max() > 0  # (rounded: x itself is not exactly a float32)
    np.testing.assert_array_equal(res.x, X[0])


def test_plot(result):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    axes = result.plot()
    assert len(axes) == 3 and "±1 posterior std" in axes[1].get_xlabel()
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("sx, sy", [(1e-6, 1e-9), (1.0, 1e-15), (1e-13, 1.0), (1e6, 1e-6)])
def test_units_do_not_matter(sx, sy):
    """Inputs or outputs in tiny or huge units are explained as in unit scale (no absolute thresholds)."""
    X = np.random.default_rng(0).normal(size=(50, 3))
    res = LocalGPExplainer(lambda Z: sy * (Z[:, 0] - 2 * Z[:, 1]) / sx, X * sx, budget=14, seed=0).explain(X[0] * sx)
    g, s = res.gradient_mean * sx / sy, res.gradient_std * sx / sy
    assert np.all(np.abs(g - [1.0, -2.0, 0.0]) <= 3 * s + 1e-6), (g, s)
    assert s.max() < 0.01 and res.relevance[2] < 0.05 and res.fidelity > 0.99
    assert not res.warnings, res.warnings
