"""GPXModel hygiene: set_train_data checks, stale caches, weight-noise floor, progress bar, clear errors, memory."""

import gpytorch
import pytest
import torch

import gpytorch_explain
from gpytorch_explain import GPXModel
from gpytorch_explain.constraints import FlooredPositive
from gpytorch_explain.utils import memory as memory_module


def _data(n=40, d=3, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    y = x[:, 0] * torch.sin(x[:, 1]) + 0.1 * torch.randn(n, generator=g, dtype=dtype)
    return x, y


# ---------------------------------------------------------------- set_train_data
def test_set_train_data_rejects_nan_targets():
    x, y = _data()
    model = GPXModel(x, y)
    bad = y.clone()
    bad[3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        model.set_train_data(targets=bad, strict=False)
    with pytest.raises(ValueError, match="columns"):
        model.set_train_data(inputs=x[:, :2], targets=y, strict=False)
    with pytest.raises(ValueError, match="Mismatched"):
        model.set_train_data(inputs=x, targets=y[:-1], strict=False)
    model.set_train_data(inputs=x[:30], targets=y[:30], strict=False)  # a valid change still works
    assert model.train_targets.shape == (30,)


# ---------------------------------------------------------------- stale caches
def _weights(model, x):
    post = model.predict_weights(x)
    return post.mean, post.lazy_covariance_matrix.point_blocks()


@pytest.mark.parametrize("change", ["noise", "outputscale_data", "lengthscale_initialize"])
def test_caches_follow_hyperparameter_changes_in_eval_mode(change):
    x, y = _data()
    model = GPXModel(x, y).eval()
    model(x[:5])  # builds the caches
    _weights(model, x[:5])
    if change == "noise":
        model.likelihood.noise = 0.3
    elif change == "outputscale_data":
        model.covar_module.base_kernel.raw_outputscale.data.add_(1.0)  # in place, no setter, _version unchanged
    else:
        model.covar_module.base_kernel.base_kernel.initialize(lengthscale=0.4)
    mean, blocks = _weights(model, x[:5])
    latent = model(x[:5])

    fresh = GPXModel(x, y)
    fresh.load_state_dict(model.state_dict())
    fresh.eval()
    ref_mean, ref_blocks = _weights(fresh, x[:5])
    ref_latent = fresh(x[:5])
    assert torch.allclose(mean, ref_mean, atol=1e-10)
    assert torch.allclose(blocks, ref_blocks, atol=1e-10)
    assert torch.allclose(latent.mean, ref_latent.mean, atol=1e-10)
    assert torch.allclose(latent.variance, ref_latent.variance, atol=1e-10)


def test_inducing_point_caches_follow_lengthscale_changes_in_eval_mode():
    x, y = _data(n=50)
    lik = gpytorch.likelihoods.GaussianLikelihood()
    rbf = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    base = gpytorch.kernels.InducingPointKernel(rbf, x[:10].clone(), lik)
    model = GPXModel(x, y, likelihood=lik, base_kernel=base).eval()
    model.predict_weights(x[:3])
    rbf.base_kernel.lengthscale = 0.5
    lik.noise = 0.2
    got = model.predict_weights(x[:3]).mean

    lik2 = gpytorch.likelihoods.GaussianLikelihood()
    rbf2 = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    base2 = gpytorch.kernels.InducingPointKernel(rbf2, x[:10].clone(), lik2)
    fresh = GPXModel(x, y, likelihood=lik2, base_kernel=base2)
    fresh.load_state_dict(model.state_dict())
    fresh.eval()
    assert torch.allclose(got, fresh.predict_weights(x[:3]).mean, atol=1e-10)


# ---------------------------------------------------------------- weight-noise floor and warm start
def test_weight_noise_never_underflows_to_zero_in_float32():
    x, y = _data(dtype=torch.float32)
    model = GPXModel(x, y)
    model.covar_module.raw_weight_noise.data.fill_(-1179.5)
    assert model.weight_noise.item() > 0
    other = GPXModel(x, y)
    other.weight_noise = model.weight_noise.detach()  # raised "must be positive, got tensor([0.])" before
    assert other.weight_noise.item() > 0 and torch.isfinite(other.covar_module.raw_weight_noise).all()
    assert isinstance(model.covar_module.raw_weight_noise_constraint, FlooredPositive)
    c = FlooredPositive()
    for value in (1e-3, 0.5, 7.0):
        t = torch.tensor([value], dtype=torch.float64)
        assert torch.allclose(c.transform(c.inverse_transform(t)), t, rtol=1e-12)
        assert torch.allclose(c.transform(t), torch.nn.functional.softplus(t), rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_readme_warm_start_recipe(dtype):
    """docs/scale.md, "Hyperparameters at scale": fit exactly on a subset, condition with inducing points on all
    rows."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 2, generator=g).to(dtype)
    y = x[:, 0] - 0.5 * x[:, 1] ** 2 + 0.05 * torch.randn(200, generator=g).to(dtype)
    lik = gpytorch.likelihoods.GaussianLikelihood()
    # the subset fit ends at lengthscales ~10, where 16 inducing points among the data have cond(K_UU) ~ 1e8 (a
    # float32 Cholesky then needs jitter); the four corners of [-2, 2]^2 keep it ~600 in both dtypes
    corners = torch.tensor([-2.0, 2.0], dtype=dtype)
    base = gpytorch.kernels.InducingPointKernel(
        gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=2)),
        inducing_points=torch.cartesian_prod(corners, corners),
        likelihood=lik,
    )
    sub = torch.randperm(len(x), generator=g)[:60]
    fitted = GPXModel(x[sub], y[sub], likelihood=lik, base_kernel=base.base_kernel).fit(max_iter=10)
    fitted.covar_module.raw_weight_noise.data.fill_(-1179.5)  # where the float32 fits of the issue ended
    model = GPXModel(x, y, likelihood=lik, base_kernel=base)
    model.weight_noise = fitted.weight_noise.detach()
    model.eval()
    assert model.weight_noise.item() > 0
    assert torch.isfinite(model.predict_weights(x[:5]).mean).all()


# ---------------------------------------------------------------- progress bar
def test_progress_bar_counts_iterations(monkeypatch):
    import tqdm.auto

    bars = []

    class Recorder:
        def __init__(self, total=None, **kwargs):
            self.total, self.n, self.max_n, self.kwargs = total, 0, 0, kwargs
            bars.append(self)

        def update(self, k=1):
            self.n += k

        def set_postfix(self, *args, **kwargs):
            pass

        def refresh(self):
            self.max_n = max(self.max_n, self.n)

        def close(self):
            self.max_n = max(self.max_n, self.n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    x, y = _data(n=50)
    for max_iter in (3, 50):
        model = GPXModel(x, y).fit(max_iter=max_iter, progress=True)
        bar = bars[-1]
        assert bar.total == max_iter
        assert bar.max_n <= bar.total
        assert bar.n == model.fit_iterations <= max_iter
        assert model.fit_evaluations == len(model.fit_history) >= model.fit_iterations


def test_no_progress_bar_does_not_import_tqdm_auto():
    """``tqdm.auto`` warns on import in a notebook without ipywidgets (TqdmWarning, seen in the rendered
    tutorials); a fit without a progress bar must not import it."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from gpytorch_explain import GPXModel\n"
        "x = torch.randn(20, 2, dtype=torch.float64)\n"
        "GPXModel(x, x[:, 0]).fit(max_iter=2)\n"
        "print('tqdm.auto' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


# ---------------------------------------------------------------- clear errors
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_refused(dtype):
    x, y = _data()
    with pytest.raises(TypeError, match="float64"):
        GPXModel(x.to(dtype), y.to(dtype))
    model = GPXModel(x, y).eval()
    with pytest.raises(TypeError, match="float64"):
        model.predict_weights(x[:2].to(dtype))


def test_base_kernel_dimension_mismatch_is_refused():
    x, y = _data(d=3)
    rbf = gpytorch.kernels.RBFKernel
    with pytest.raises(ValueError, match="ard_num_dims = 2"):
        GPXModel(x, y, base_kernel=gpytorch.kernels.ScaleKernel(rbf(ard_num_dims=2)))
    with pytest.raises(ValueError, match="active_dims"):
        GPXModel(x, y, base_kernel=rbf(active_dims=[0, 5]))
    with pytest.raises(ValueError, match="ard_num_dims = 3"):
        GPXModel(x, y, base_kernel=rbf(ard_num_dims=3, active_dims=[0, 1]))
    with pytest.raises(ValueError, match="inducing points with 2 columns"):
        lik = gpytorch.likelihoods.GaussianLikelihood()
        GPXModel(x, y, base_kernel=gpytorch.kernels.InducingPointKernel(rbf(), x[:5, :2].clone(), lik))
    GPXModel(x, y, base_kernel=rbf(ard_num_dims=2, active_dims=[0, 2]))  # consistent: fine


def test_feature_names():
    x, y = _data(d=3)
    with pytest.raises(ValueError, match="2 names but there are 3 features"):
        GPXModel(x, y, feature_names=["a", "b"])
    with pytest.raises(ValueError, match="4 names but there are 3 features"):
        GPXModel(x, y, feature_names=["a", "b", "c", "d"])
    assert GPXModel(x, y).feature_names == ["x0", "x1", "x2"]
    model = GPXModel(x, y).eval()
    assert model.explain(x[:2]).feature_names == ["x0", "x1", "x2"]
    assert GPXModel(x, y, x[:, :2]).feature_names == ["z0", "z1"]


# ---------------------------------------------------------------- memory
def test_memory_check_before_the_dense_path(monkeypatch):
    x, y = _data(n=60)
    monkeypatch.setattr(memory_module, "available_memory", lambda device=None: 10_000)
    model = GPXModel(x, y)
    with pytest.raises(MemoryError, match="inducing-point") as info:
        model.fit(max_iter=2)
    assert "GiB" in str(info.value) and "n = 60" in str(info.value)
    with pytest.raises(MemoryError, match="VariationalGPXModel"):
        model.eval()
        model.predict_weights(x[:2])
    with gpytorch_explain.settings.check_memory(False):
        model.fit(max_iter=2)
    needed = 8 * 60 * 60 * 8
    monkeypatch.setattr(memory_module, "available_memory", lambda device=None: int(needed * 1.5))
    with pytest.warns(ResourceWarning, match="needs about"):
        GPXModel(x, y).fit(max_iter=2)
    # an inducing-point base needs no n x n matrix: not checked
    monkeypatch.setattr(memory_module, "available_memory", lambda device=None: 10_000)
    lik = gpytorch.likelihoods.GaussianLikelihood()
    base = gpytorch.kernels.InducingPointKernel(gpytorch.kernels.RBFKernel(), x[:8].clone(), lik)
    GPXModel(x, y, likelihood=lik, base_kernel=base).fit(max_iter=2)


def test_available_memory_is_positive():
    value = memory_module.available_memory("cpu")
    assert value is None or value > 0


def test_float64_models_start_at_float64_values():
    # the defaults were set before the conversion to the data's dtype: a float64 model started at a noise of
    # 0.010000002 (0.01 rounded through float32)
    x = torch.randn(20, 2, dtype=torch.float64)
    model = GPXModel(x, x[:, 0])
    assert abs(model.likelihood.noise.item() - 0.01) < 1e-15
    assert abs(model.covar_module.weight_noise.item() - 0.01) < 1e-15
    assert model.likelihood.noise.dtype == torch.float64


def test_float64_variational_models_start_at_float64_values():
    from gpytorch_explain import VariationalGPXModel

    x = torch.randn(20, 2, dtype=torch.float64)
    model = VariationalGPXModel(x[:6])
    assert abs(model.likelihood.noise.item() - 0.01) < 1e-15
    assert abs(model.weight_noise.item() - 0.01) < 1e-15
