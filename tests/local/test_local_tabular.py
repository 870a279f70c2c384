"""LocalGPExplainer on pandas DataFrames: codes for non-numeric columns, DataFrames for the black box."""

import warnings

import numpy as np
import pytest

from gpytorch_explain.local import LocalGPExplainer, from_sklearn_regressor
from gpytorch_explain.local.tabular import FrameCodec
from tests.helpers import NO_RELEVANCE

pd = pytest.importorskip("pandas")

CITIES = ["lyon", "nice", "paris"]
EFFECT = {"lyon": -1.0, "nice": 0.5, "paris": 2.0}


@pytest.fixture(scope="module")
def frame():
    rng = np.random.RandomState(0)
    n = 120
    return pd.DataFrame(
        {
            "age": rng.uniform(20, 70, n),
            "rooms": rng.randint(1, 6, n),
            "city": rng.choice(CITIES, n),
            "member": rng.rand(n) < 0.4,
            "tier": pd.Categorical(rng.choice(["b", "a"], n), categories=["a", "b", "c"]),
        }
    )


def frame_model(df):
    """A black box written against the DataFrame's column names and values (it fails on arrays)."""
    city = df["city"].map(EFFECT).to_numpy(dtype=float)
    return 0.05 * df["age"].to_numpy() + 0.3 * df["rooms"].to_numpy() + city + 1.0 * df["member"].to_numpy()


class Recorder:
    def __init__(self, fn):
        self.fn, self.frames = fn, []

    def __call__(self, df):
        self.frames.append(df.copy())
        return self.fn(df)


def test_codec_round_trip_keeps_values_and_dtypes(frame):
    codec = FrameCodec(frame, categorical_features=["rooms"])
    assert codec.categorical == [1, 2, 3, 4]
    assert sorted(codec.levels) == [2, 3, 4]  # rooms stays numeric: a listed categorical, not an encoded one
    assert list(codec.levels[2]) == CITIES and list(codec.levels[3]) == [False, True]
    assert list(codec.levels[4]) == ["a", "b"]  # observed categories, in the dtype's order ("c" never occurs)
    X = codec.encode(frame)
    assert X.dtype == np.float64 and X.shape == frame.shape
    np.testing.assert_array_equal(X[:, 2], [CITIES.index(c) for c in frame["city"]])
    back = codec.decode(X)
    pd.testing.assert_frame_equal(back, frame)
    assert codec.value_text(2, 2.0) == "paris"


def test_integer_categorical_columns_keep_their_dtype():
    df = pd.DataFrame({"a": [1.5, 2.5, 0.5, 3.0], "n": pd.array([1, 2, 2, 3], dtype="Int64"), "m": [4, 5, 4, 5]})
    codec = FrameCodec(df, categorical_features=["n", "m"])
    assert codec.categorical == [1, 2] and not codec.levels  # integer columns stay numbers (their own codes)
    pd.testing.assert_frame_equal(codec.decode(codec.encode(df)), df)


def test_black_box_gets_frames_and_categories_stay_seen(frame):
    rec = Recorder(frame_model)
    ex = LocalGPExplainer(rec, frame, budget=24, seed=0, interval=0.5)
    assert ex.feature_names == list(frame.columns) and ex.categorical_features == [2, 3, 4]
    res = ex.explain(frame.iloc[5])
    assert res.x_samples.shape == (24, 5) and res.y_samples.shape == (24,)
    received = pd.concat(rec.frames, ignore_index=True)
    assert list(received.columns) == list(frame.columns)
    # each column keeps its dtype, except a continuous integer column, which takes values between the integers
    assert list(received.dtypes) == [frame.dtypes[c] if c != "rooms" else np.dtype(float) for c in frame.columns]
    assert set(received["city"]) <= set(CITIES) and set(received["member"]) <= {False, True}
    pd.testing.assert_frame_equal(received, res.samples_frame())
    pd.testing.assert_series_equal(received.iloc[0], frame.iloc[5].astype(received.iloc[0].dtype), check_names=False)
    np.testing.assert_allclose(res.y_samples, frame_model(received))
    # the summary shows categories as values, not codes
    line = next(t for t in res.summary().splitlines() if t.startswith("city"))
    assert frame["city"].iloc[5] in line
    table = res.to_frame()
    assert list(table.index) == list(frame.columns) and table.loc["city", "value"] == frame["city"].iloc[5]
    np.testing.assert_array_equal(table["gradient_std"].to_numpy(), res.gradient_std)
    np.testing.assert_array_equal(table["relevance"].to_numpy(), res.relevance)
    mean, _ = res.predict(received.iloc[:3])
    np.testing.assert_allclose(mean, res.predict(res.x_samples[:3])[0])


def test_frame_equals_array_with_codes(frame):
    """A DataFrame gives the explanation of the numeric array of its codes, with the codes' columns categorical."""
    codec = FrameCodec(frame)
    X = codec.encode(frame)
    kw = dict(budget=20, seed=3, acquisition="variance", interval=0.5)
    r_frame = LocalGPExplainer(frame_model, frame, **kw).explain(frame.iloc[7])
    r_array = LocalGPExplainer(lambda Z: frame_model(codec.decode(Z)), X, categorical_features=[2, 3, 4], **kw).explain(
        X[7]
    )
    for name in ("x_samples", "y_samples", "relevance", "gradient_mean", "gradient_std", "integrated_gradients"):
        np.testing.assert_allclose(getattr(r_frame, name), getattr(r_array, name), rtol=1e-10, atol=1e-12)


def test_numeric_frame_equals_array():
    rng = np.random.RandomState(1)
    X = rng.randn(80, 3)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    kw = dict(budget=16, seed=2, interval=0.5, **NO_RELEVANCE)
    r_frame = LocalGPExplainer(lambda d: d["a"].to_numpy() - 2 * d["c"].to_numpy(), df, **kw).explain(df.iloc[4])
    r_array = LocalGPExplainer(lambda Z: Z[:, 0] - 2 * Z[:, 2], X, **kw).explain(X[4])
    np.testing.assert_allclose(r_frame.x_samples, r_array.x_samples)
    np.testing.assert_allclose(r_frame.gradient_mean, r_array.gradient_mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(r_frame.gradient_mean, [1.0, 0.0, -2.0], atol=3 * r_frame.gradient_std.max() + 1e-6)


def test_unseen_category_in_x_is_evaluated_and_warned(frame):
    rec = Recorder(frame_model)
    x = frame.iloc[0].copy()
    x["city"] = "marseille"
    EFFECT["marseille"] = 0.0
    try:
        with pytest.warns(UserWarning, match="'marseille'.*never takes.*'lyon', 'nice', 'paris'"):
            ex = LocalGPExplainer(rec, frame, budget=16, seed=0, **NO_RELEVANCE)
            res = ex.explain(x)
    finally:
        del EFFECT["marseille"]
    received = pd.concat(rec.frames, ignore_index=True)
    n_cont = sum(1 for j in ex.active if j not in ex.categorical_features)
    k = 1 + n_cont * {"central": 2, "forward": 1}[ex.stencil_kind] if ex.stencil is not None else 1
    assert (received["city"].iloc[:k] == "marseille").all()  # x and its stencil rows (one continuous step each)
    assert set(received["city"].iloc[k:]) <= set(CITIES)
    assert len(res.y_samples) == 16


def test_sklearn_pipeline_with_column_names(frame):
    pytest.importorskip("sklearn")
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    y = frame_model(frame)
    ct = ColumnTransformer([("onehot", OneHotEncoder(), ["city", "member", "tier"])], remainder="passthrough")
    model = make_pipeline(ct, Ridge(alpha=1e-6)).fit(frame, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "X does not have valid feature names" from scikit-learn
        res = LocalGPExplainer(from_sklearn_regressor(model), frame, budget=20, seed=0, **NO_RELEVANCE).explain(
            frame.iloc[3]
        )
    # the pipeline is linear in age (0.05) and rooms (0.3): the surrogate's slope at x finds them
    g, s = res.gradient_mean, res.gradient_std
    assert abs(g[0] - 0.05) <= 2 * s[0] + 1e-3 and abs(g[1] - 0.3) <= 2 * s[1] + 1e-2


def test_helper_names_arrays_for_a_model_fitted_on_a_frame():
    from sklearn.linear_model import LinearRegression

    rng = np.random.RandomState(0)
    df = pd.DataFrame(rng.randn(50, 2), columns=["u", "v"])
    model = LinearRegression().fit(df, df["u"] - df["v"])
    f = from_sklearn_regressor(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(f(df.to_numpy()[:4]), (df["u"] - df["v"]).to_numpy()[:4])
        res = LocalGPExplainer(f, df.to_numpy(), budget=14, seed=0, **NO_RELEVANCE).explain(df.to_numpy()[0])
    assert res.y_samples.shape == (14,)


def test_bad_tabular_input(frame):
    with pytest.raises(ValueError, match="pandas DataFrame"):
        LocalGPExplainer(frame_model, frame.to_numpy(dtype=object), budget=16)
    with pytest.raises(ValueError, match="neither an index nor a column name"):
        LocalGPExplainer(frame_model, frame, categorical_features=["town"], budget=16)
    with pytest.raises(ValueError, match="non-numeric columns"):
        LocalGPExplainer(frame_model, frame, input_type="numpy", budget=16)
    bad = frame.copy()
    bad.loc[3, "city"] = None
    with pytest.raises(ValueError, match="'city' has missing values"):
        LocalGPExplainer(frame_model, bad, budget=16)
    dup = pd.concat([frame[["age"]], frame[["age"]]], axis=1)
    with pytest.raises(ValueError, match="duplicate column names"):
        LocalGPExplainer(lambda d: np.zeros(len(d)), dup, budget=16)
    ex = LocalGPExplainer(lambda Z: Z[:, 0], frame, budget=16, seed=0)
    with pytest.raises(TypeError, match="receives pandas DataFrames.*input_type='numpy'"):
        ex.explain(frame.iloc[0])
    ex = LocalGPExplainer(frame_model, frame, budget=16, seed=0)
    with pytest.raises(ValueError, match="lacks the training data's column"):
        ex.explain(frame[["age", "rooms"]].iloc[:1])
    x = frame.iloc[0].copy()
    x["city"] = np.nan
    with pytest.raises(ValueError, match="'city' has a missing value"):
        ex.explain(x)
    with pytest.raises(ValueError, match="one instance"):
        ex.explain(frame.iloc[:2])
    with pytest.raises(RuntimeError, match="DataFrame"):
        LocalGPExplainer(
            lambda Z: Z[:, 0], np.random.RandomState(0).randn(30, 2), budget=12, seed=0, **NO_RELEVANCE
        ).explain(np.zeros(2)).samples_frame()


def test_a_series_is_read_by_label_never_by_position(frame):
    ex = LocalGPExplainer(frame_model, frame, budget=12, seed=0)
    row = frame.iloc[3]
    shuffled = row[["city", "age", "tier", "member", "rooms"]]  # same labels, another order: read by label
    np.testing.assert_array_equal(ex._check_x(shuffled), ex._check_x(row))
    renamed = row.rename({"rooms": "Rooms"})  # one label wrong: an error naming both, not a positional read
    match = r"lacks the training data's column\(s\) \['rooms'\].*unknown label\(s\) \['Rooms'\]"
    with pytest.raises(ValueError, match=match):
        ex._check_x(renamed)
    positional = pd.Series(row.to_numpy(dtype=object))  # a RangeIndex: positions are all it has
    np.testing.assert_array_equal(ex._check_x(positional), ex._check_x(row))


def test_an_integer_categorical_column_needs_whole_numbers(frame):
    ex = LocalGPExplainer(frame_model, frame, categorical_features=["rooms"], budget=12, seed=0)
    x = frame.iloc[0].copy()
    x["rooms"] = 1.6  # the black box would receive 2 (its integer dtype) while x_samples said 1.6
    with pytest.raises(ValueError, match="value 1.6 for the integer categorical column 'rooms' is not a whole number"):
        ex.explain(x)


def test_time_columns_and_named_missing_values():
    df = pd.DataFrame({"a": np.arange(5.0), "when": pd.date_range("2026-01-01", periods=5)})
    with pytest.raises(TypeError, match="column 'when' holds datetime64.*convert it to numbers"):
        LocalGPExplainer(lambda d: d["a"].to_numpy(), df)
    df = pd.DataFrame({"a": np.arange(5.0), "b": np.array([1.0, np.nan, 3.0, 4.0, 5.0])})
    with pytest.raises(ValueError, match=r"NaN or infinite values \(in feature\(s\) \['b'\]\)"):
        LocalGPExplainer(lambda d: d["a"].to_numpy(), df)


def test_results_keep_their_own_categories(frame):
    ex = LocalGPExplainer(frame_model, frame, budget=12, seed=0, **NO_RELEVANCE)
    first = ex.explain(frame.iloc[0])
    x = frame.iloc[1].copy()
    x["city"] = "marseille"
    EFFECT["marseille"] = 0.0
    try:
        with pytest.warns(UserWarning, match="never takes"):
            ex.explain(x)
    finally:
        del EFFECT["marseille"]
    assert "marseille" not in list(first.codec.levels[2])  # an earlier result does not learn later categories
    with pytest.raises(ValueError, match="'marseille', which training_data never takes"):
        first.predict(x.to_frame().T)
    mean, _ = first.predict(frame.iloc[2])  # a row Series, as explain() takes it
    assert mean.shape == (1,)
    table = first.to_frame()
    assert table.loc["city", "baseline"] in CITIES  # a category, not a code
