"""Bad input fails early with a clear error naming the problem; good input is never modified; state round-trips."""

import io

import gpytorch
import pytest
import torch

import gpytorch_explain
from gpytorch_explain import GPXKernel, GPXModel
from tests.helpers import generator as _gen

# State errors (train mode, no training data): RuntimeError, or the package's ModelStateError (a RuntimeError and
# ValueError subclass) where it exists.
STATE_ERROR = getattr(gpytorch_explain, "ModelStateError", RuntimeError)
DTYPE = torch.float64
N, D, d, M = 15, 3, 2, 4


def _data(dtype=DTYPE, n=N, seed=0):
    x = torch.randn(n, D, dtype=dtype, generator=_gen(seed))
    z = torch.randn(n, d, dtype=dtype, generator=_gen(seed + 1))
    y = (x[:, 0] * z[:, 0] + torch.sin(x[:, 1]) * z[:, 1]).to(dtype)
    return x, y, z


def _test_points(dtype=DTYPE):
    return torch.randn(M, D, dtype=dtype, generator=_gen(10)), torch.randn(M, d, dtype=dtype, generator=_gen(11))


@pytest.fixture(scope="module")
def model_z():
    """Eval-mode model with separate explanation features z (d = 2)."""
    x, y, z = _data()
    return GPXModel(x, y, z).eval()


@pytest.fixture(scope="module")
def model_x():
    """Eval-mode model with z = x (d = D = 3)."""
    x, y, _ = _data()
    return GPXModel(x, y).eval()


def _with_bad(t, value, index=(1, 0)):
    t = t.clone()
    t[index if t.dim() == 2 else index[0]] = value
    return t


# =============================================================================================
# construction
# =============================================================================================
@pytest.mark.parametrize(
    "which, match",
    [
        ("x", "train_x has 15, train_y has 14"),
        ("z", "train_z has 14"),
        ("y", "train_y has 14"),
    ],
)
def test_mismatched_number_of_samples(which, match):
    x, y, z = _data()
    args = {"train_x": x, "train_y": y, "train_z": z}
    if which == "x":
        args["train_y"] = y[:-1]
        args["train_z"] = None
    else:
        args[f"train_{which}"] = args[f"train_{which}"][:-1]
    with pytest.raises(ValueError, match=f"Mismatched number of samples.*{match}"):
        GPXModel(**args)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("which", ["x", "y", "z"])
def test_non_finite_training_data(which, value):
    x, y, z = _data()
    args = {"train_x": x, "train_y": y, "train_z": z}
    args[f"train_{which}"] = _with_bad(args[f"train_{which}"], value)
    with pytest.raises(ValueError, match=f"train_{which} contains 1 NaN or infinite"):
        GPXModel(**args)


@pytest.mark.parametrize(
    "which, make, match",
    [
        ("x", lambda t: t[:, 0], "train_x must be a 2-D tensor.*1-D"),
        ("x", lambda t: t.unsqueeze(0), "train_x must be a 2-D tensor.*3-D"),
        ("z", lambda t: t[:, 0], "train_z must be a 2-D tensor.*1-D"),
        ("z", lambda t: t.unsqueeze(0), "train_z must be a 2-D tensor.*3-D"),
        ("y", lambda t: t.unsqueeze(-1), r"train_y must be a 1-D tensor \(n,\).*2-D"),
        ("y", lambda t: t[0], "train_y must be a 1-D tensor.*0-D"),
    ],
    ids=["x-1d", "x-3d", "z-1d", "z-3d", "y-2d", "y-0d"],
)
def test_wrong_number_of_dimensions_at_construction(which, make, match):
    x, y, z = _data()
    args = {"train_x": x, "train_y": y, "train_z": z}
    args[f"train_{which}"] = make(args[f"train_{which}"])
    with pytest.raises(ValueError, match=match):
        GPXModel(**args)


@pytest.mark.parametrize("int_dtype", [torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("which", ["x", "y", "z"])
def test_integer_training_data(which, int_dtype):
    x, y, z = _data()
    args = {"train_x": x, "train_y": y, "train_z": z}
    args[f"train_{which}"] = args[f"train_{which}"].round().to(int_dtype)
    with pytest.raises(TypeError, match=f"train_{which} must be a floating-point tensor.*{int_dtype}"):
        GPXModel(**args)


@pytest.mark.parametrize("convert", ["numpy", "list"])
@pytest.mark.parametrize("which", ["x", "y", "z"])
def test_non_tensor_training_data(which, convert):
    x, y, z = _data()
    args = {"train_x": x, "train_y": y, "train_z": z}
    t = args[f"train_{which}"]
    args[f"train_{which}"] = t.numpy() if convert == "numpy" else t.tolist()
    expected = "ndarray" if convert == "numpy" else "list"
    with pytest.raises(TypeError, match=f"train_{which} must be a torch.Tensor, got {expected}"):
        GPXModel(**args)


@pytest.mark.parametrize("which", ["x", "y", "z"])
def test_mismatched_training_dtypes(which):
    x, y, z = _data()
    args = {"train_x": x, "train_y": y, "train_z": z}
    args[f"train_{which}"] = args[f"train_{which}"].float()
    with pytest.raises(TypeError, match="must share one dtype.*float32.*float64"):
        GPXModel(**args)


@pytest.mark.parametrize(
    "likelihood",
    [
        gpytorch.likelihoods.BernoulliLikelihood(),
        gpytorch.likelihoods.MultitaskGaussianLikelihood(num_tasks=2),
        gpytorch.likelihoods.FixedNoiseGaussianLikelihood(noise=torch.ones(N)),
    ],
    ids=lambda lik: type(lik).__name__,
)
def test_non_gaussian_likelihood(likelihood):
    x, y, _ = _data()
    with pytest.raises(TypeError, match=f"needs a GaussianLikelihood.*got {type(likelihood).__name__}"):
        GPXModel(x, y, likelihood=likelihood)


@pytest.mark.parametrize(
    "base_kernel, name",
    [(torch.nn.Linear(3, 3), "Linear"), (gpytorch.kernels.RBFKernel, "type"), ("rbf", "str")],
    ids=["module", "class", "string"],
)
def test_base_kernel_not_a_kernel(base_kernel, name):
    x, y, _ = _data()
    with pytest.raises(TypeError, match=f"base_kernel must be a gpytorch Kernel, got {name}"):
        GPXModel(x, y, base_kernel=base_kernel)
    with pytest.raises(TypeError, match="base_kernel must be a gpytorch Kernel"):
        GPXKernel(base_kernel, x_dims=D)


@pytest.mark.parametrize(
    "use_z, names, match",
    [
        (True, ["a", "b", "c"], "feature_names has 3 names but there are 2 features"),
        (True, ["a"], "feature_names has 1 names but there are 2 features"),
        (False, ["a", "b"], "feature_names has 2 names but there are 3 features"),
    ],
)
def test_feature_names_of_wrong_length(use_z, names, match):
    x, y, z = _data()
    with pytest.raises(ValueError, match=match):
        GPXModel(x, y, z if use_z else None, feature_names=names)


# =============================================================================================
# prediction: model(x, z), predict_weights(x), explain(x, z)
# =============================================================================================
def _call(model, method, x, z):
    if method == "call":
        return model(x) if z is None else model(x, z)
    if method == "predict_weights":
        return model.predict_weights(x)
    return model.explain(x, z)


METHODS = ["call", "predict_weights", "explain"]


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("method", METHODS)
def test_non_finite_test_x(model_z, model_x, method, value):
    xt, zt = _test_points()
    bad = _with_bad(xt, value)
    with pytest.raises(ValueError, match="x contains 1 NaN or infinite"):
        _call(model_z, method, bad, zt)
    with pytest.raises(ValueError, match="x contains 1 NaN or infinite"):
        _call(model_x, method, bad, None)


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("method", ["call", "explain"])
def test_non_finite_test_z(model_z, method, value):
    xt, zt = _test_points()
    with pytest.raises(ValueError, match="z contains 1 NaN or infinite"):
        _call(model_z, method, xt, _with_bad(zt, value))


def test_non_finite_joined_inputs(model_z):
    """model(*model.train_inputs)-style calls with already-joined [x | z] rows are checked too."""
    xt, zt = _test_points()
    with pytest.raises(ValueError, match="NaN or infinite"):
        model_z(_with_bad(torch.cat([xt, zt], -1), float("nan"), (0, 4)))


@pytest.mark.parametrize("method", METHODS)
def test_wrong_number_of_x_columns(model_z, model_x, method):
    xt, zt = _test_points()
    for bad in (xt[:, :2], torch.cat([xt, xt[:, :1]], -1)):
        with pytest.raises(ValueError, match=rf"x must have 3 columns \(the model's x has D = 3\), got {bad.size(-1)}"):
            _call(model_z, method, bad, zt)
        with pytest.raises(ValueError, match="x must have 3 columns"):
            _call(model_x, method, bad, None)


@pytest.mark.parametrize("method", ["call", "explain"])
def test_wrong_number_of_z_columns(model_z, method):
    xt, zt = _test_points()
    for bad in (zt[:, :1], torch.cat([zt, zt], -1)):
        with pytest.raises(ValueError, match=rf"z must have 2 columns \(the model's z has d = 2\), got {bad.size(-1)}"):
            _call(model_z, method, xt, bad)


@pytest.mark.parametrize("method", ["call", "explain"])
def test_mismatched_rows_of_test_x_and_z(model_z, method):
    xt, zt = _test_points()
    with pytest.raises(ValueError, match="Mismatched number of samples n: x has 4, z has 3"):
        _call(model_z, method, xt, zt[:3])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad_ndim", [1, 3])
def test_wrong_number_of_dimensions_of_test_x(model_z, model_x, method, bad_ndim):
    xt, zt = _test_points()
    bad = xt[0] if bad_ndim == 1 else xt.unsqueeze(0)
    with pytest.raises(ValueError, match=f"x must be a 2-D tensor.*{bad_ndim}-D"):
        _call(model_z, method, bad, zt)
    with pytest.raises(ValueError, match=f"x must be a 2-D tensor.*{bad_ndim}-D"):
        _call(model_x, method, bad, None)


@pytest.mark.parametrize("method", ["call", "explain"])
@pytest.mark.parametrize("bad_ndim", [1, 3])
def test_wrong_number_of_dimensions_of_test_z(model_z, method, bad_ndim):
    xt, zt = _test_points()
    bad = zt[0] if bad_ndim == 1 else zt.unsqueeze(0)
    with pytest.raises(ValueError, match=f"z must be a 2-D tensor.*{bad_ndim}-D"):
        _call(model_z, method, xt, bad)


@pytest.mark.parametrize("method", METHODS)
def test_integer_test_inputs(model_z, model_x, method):
    xt, zt = _test_points()
    with pytest.raises(TypeError, match="x must be a floating-point tensor.*torch.int64"):
        _call(model_z, method, xt.long(), zt)
    with pytest.raises(TypeError, match="x must be a floating-point tensor.*torch.int64"):
        _call(model_x, method, xt.long(), None)
    if method != "predict_weights":
        with pytest.raises(TypeError, match="z must be a floating-point tensor.*torch.int32"):
            _call(model_z, method, xt, zt.int())


@pytest.mark.parametrize("method", METHODS)
def test_numpy_test_inputs(model_z, model_x, method):
    xt, zt = _test_points()
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got ndarray"):
        _call(model_z, method, xt.numpy(), zt)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got ndarray"):
        _call(model_x, method, xt.numpy(), None)
    if method != "predict_weights":
        with pytest.raises(TypeError, match="z must be a torch.Tensor, got ndarray"):
            _call(model_z, method, xt, zt.numpy())


@pytest.mark.parametrize("method", METHODS)
def test_float32_test_inputs_on_float64_model(model_z, model_x, method):
    xt, zt = _test_points()
    with pytest.raises(TypeError, match="x has dtype torch.float32 but the model is torch.float64"):
        _call(model_z, method, xt.float(), zt.float())
    with pytest.raises(TypeError, match="x has dtype torch.float32 but the model is torch.float64"):
        _call(model_x, method, xt.float(), None)
    if method != "predict_weights":
        with pytest.raises(TypeError, match="x and z must share one dtype.*float64.*float32"):
            _call(model_z, method, xt, zt.float())


@pytest.mark.parametrize("method", ["call", "explain"])
def test_z_passed_to_a_model_built_without_train_z(model_x, method):
    xt, _ = _test_points()
    with pytest.raises(ValueError, match=r"built with z = x \(no train_z\); do not pass z"):
        _call(model_x, method, xt, xt)


@pytest.mark.parametrize("method", ["call", "explain"])
def test_z_omitted_for_a_model_built_with_train_z(model_z, method):
    xt, _ = _test_points()
    with pytest.raises(ValueError, match=r"explains with separate features z \(d = 2\)"):
        _call(model_z, method, xt, None)


@pytest.mark.parametrize("method", ["predict_weights", "explain"])
def test_train_mode(method):
    """A state error, not bad input: RuntimeError (ModelStateError) naming eval mode."""
    x, y, z = _data()
    model = GPXModel(x, y, z)
    assert model.training
    xt, zt = _test_points()
    with pytest.raises(STATE_ERROR, match=rf"{method} needs the model in eval mode: call model.eval\(\)"):
        _call(model, method, xt, zt)


@pytest.mark.parametrize("method", ["predict_weights", "explain"])
@pytest.mark.parametrize("clear", ["inputs_and_targets", "inputs_only"])
def test_model_without_training_data(method, clear):
    x, y, z = _data()
    model = GPXModel(x, y, z).eval()
    model.train_inputs = None
    if clear == "inputs_and_targets":
        model.train_targets = None
    xt, zt = _test_points()
    with pytest.raises(STATE_ERROR, match=f"{method} needs training data; this model has none"):
        _call(model, method, xt, zt)
    with pytest.raises(STATE_ERROR, match="fit needs training data"):
        model.fit(max_iter=1)


def test_set_train_data_with_wrong_columns_is_refused():
    """set_train_data runs the constructor's checks: joined [x | z] rows with the wrong width are refused at once."""
    x, y, z = _data()
    model = GPXModel(x, y, z)
    with pytest.raises(ValueError, match=r"inputs must have 5 columns"):
        model.set_train_data(x, y, strict=False)  # forgot z


def test_gpx_kernel_inputs_with_wrong_number_of_columns(model_z, model_x):
    kernel = model_z.covar_module  # x_dims = 3, z_dims = 2: rows are [x | z], 5 columns
    good = torch.randn(4, 5, dtype=DTYPE)
    for bad in (torch.randn(4, 3, dtype=DTYPE), torch.randn(4, 6, dtype=DTYPE)):
        msg = rf"GPXKernel expects inputs with 5 columns \(3 for x \+ 2 for z\), got {bad.size(-1)}"
        # the lazy kernel tensor raises when evaluated; GPyTorch's Kernel.__call__ rejects x1/x2 widths that differ
        with pytest.raises(ValueError, match=msg):
            kernel(bad).to_dense()
        with pytest.raises(ValueError, match=msg):
            kernel.forward(good, bad)
        with pytest.raises(ValueError, match=msg):
            kernel.forward(bad, good)
        with pytest.raises(RuntimeError, match="same number of dimensions"):
            kernel(good, bad)
        with pytest.raises(ValueError, match=msg):
            kernel(bad, diag=True)
    with pytest.raises(ValueError, match=r"GPXKernel expects inputs with 3 columns \(3 for x\), got 5"):
        model_x.covar_module(good).to_dense()
    with pytest.raises(ValueError, match="x_dims and z_dims must be positive"):
        GPXKernel(gpytorch.kernels.RBFKernel(), x_dims=0)


def test_joined_inputs_with_wrong_dtype(model_z):
    xt, zt = _test_points()
    with pytest.raises(TypeError, match="dtype"):
        model_z(torch.cat([xt, zt], -1).float())


def test_explain_with_zero_test_points(model_z):
    xt, zt = _test_points()
    expl = model_z.explain(xt[:0], zt[:0])
    assert expl.weights_mean.shape == (0, d)
    assert expl.weights_covariance.shape == (0, d, d)


# =============================================================================================
# user tensors are never modified
# =============================================================================================
@pytest.mark.parametrize("use_z", [True, False], ids=["z", "z=x"])
def test_user_tensors_are_not_modified(use_z):
    x, y, z = _data()
    xt, zt = _test_points()
    if not use_z:
        z, zt = None, None
    originals = [t.clone() for t in (x, y, z, xt, zt) if t is not None]
    model = GPXModel(x, y, z).fit(max_iter=5)
    with torch.no_grad():
        latent = model(xt) if zt is None else model(xt, zt)
        outputs = [model.likelihood(latent).variance, model.predict_weights(xt).covariance_matrix]
        expl = model.explain(xt, zt)
        outputs += [expl.contributions_std, expl.summary(0), expl.to_numpy()]
    # training with GPyTorch's own loop on the same tensors
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    (-mll(model(*model.train_inputs), model.train_targets)).backward()
    for before, after in zip(originals, [t for t in (x, y, z, xt, zt) if t is not None], strict=True):
        assert torch.equal(before, after)


# =============================================================================================
# state_dict round trip and float32
# =============================================================================================
def _all_predictions(model, xt, zt):
    with torch.no_grad():
        latent = model(xt) if zt is None else model(xt, zt)
        predictive = model.likelihood(latent)
        weights = model.predict_weights(xt)
        expl = model.explain(xt, zt)
        return {
            "latent_mean": latent.mean,
            "latent_var": latent.variance,
            "latent_cov": latent.covariance_matrix,
            "pred_mean": predictive.mean,
            "pred_var": predictive.variance,
            "weight_mean": weights.mean,
            "weight_var": weights.variance,
            "weight_cov": weights.covariance_matrix,
            "explain_weight_blocks": expl.weights_covariance,
            "explain_pred_std": expl.prediction_std,
        }


@pytest.mark.parametrize("use_z", [True, False], ids=["z", "z=x"])
def test_state_dict_round_trip_is_bit_for_bit(use_z):
    x, y, z = _data()
    xt, zt = _test_points()
    if not use_z:
        z, zt = None, None
    model = GPXModel(x, y, z, feature_names=None).fit(max_iter=5)
    expected = _all_predictions(model, xt, zt)

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    fresh = GPXModel(x, y, z)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    fresh.eval()
    got = _all_predictions(fresh, xt, zt)
    for key, value in expected.items():
        assert torch.equal(value, got[key]), key


@pytest.mark.parametrize("use_z", [True, False], ids=["z", "z=x"])
def test_float32_model_end_to_end(use_z):
    x, y, z = _data(dtype=torch.float32, n=30)
    xt, zt = _test_points(dtype=torch.float32)
    if not use_z:
        z, zt = None, None
    model = GPXModel(x, y, z).fit(max_iter=10)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.likelihood.noise.dtype == torch.float32
    num_features = d if use_z else D
    preds = _all_predictions(model, xt, zt)
    shapes = {
        "latent_mean": (M,),
        "latent_var": (M,),
        "latent_cov": (M, M),
        "pred_mean": (M,),
        "pred_var": (M,),
        "weight_mean": (M, num_features),
        "weight_var": (M, num_features),
        "weight_cov": (M * num_features, M * num_features),
        "explain_weight_blocks": (M, num_features, num_features),
        "explain_pred_std": (M,),
    }
    for key, value in preds.items():
        assert value.dtype == torch.float32, key
        assert value.shape == shapes[key], key
        assert torch.isfinite(value).all(), key
    assert (preds["pred_var"] > preds["latent_var"]).all()
    # the per-point blocks of explain() are the diagonal blocks of the joint weight covariance
    k = num_features
    blocks = torch.stack([preds["weight_cov"][i * k : (i + 1) * k, i * k : (i + 1) * k] for i in range(M)])
    torch.testing.assert_close(preds["explain_weight_blocks"], blocks, rtol=1e-3, atol=1e-5)
    # and a float64 test point is refused with a dtype error
    with pytest.raises(TypeError, match="dtype torch.float64 but the model is torch.float32"):
        model.predict_weights(xt.double())
