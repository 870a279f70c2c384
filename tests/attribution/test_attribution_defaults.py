"""Defaults users can trust: adaptive IG quadrature, dense Cholesky up to gpytorch_explain's max_cholesky_size,
caches rebuilt after hyperparameter changes in eval mode, clear input errors, one uncertainty convention in plots."""

from __future__ import annotations

import copy
import warnings

import gpytorch
import linear_operator
import pytest
import torch

import gpytorch_explain
import gpytorch_explain.attribution.adaptive as adaptive_module
from gpytorch_explain import PosteriorGradient, PosteriorIntegratedGradients
from gpytorch_explain.attribution import DerivedCovariance, GradientFunctional
from gpytorch_explain.attribution.adaptive import QuadratureWarning

DTYPE = torch.float64


class GP(gpytorch.models.ExactGP):
    def __init__(self, X, y, kernel, mean=None):
        super().__init__(X, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = mean or gpytorch.means.ConstantMean()
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _periodic_model():
    """A ScaleKernel(PeriodicKernel()) GP with period 0.65 and lengthscale 0.26 on paths several periods long."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(60, 3, generator=g, dtype=DTYPE) * 3
    w = 2 * torch.pi / 0.65
    y = torch.sin(w * X[:, 0]) + torch.cos(w * X[:, 1]) + 0.5 * torch.sin(w * X[:, 2])
    model = GP(X, y, gpytorch.kernels.ScaleKernel(gpytorch.kernels.PeriodicKernel())).to(DTYPE)
    model.covar_module.base_kernel.period_length = 0.65
    model.covar_module.base_kernel.lengthscale = 0.26
    model.covar_module.outputscale = 4.0
    model.likelihood.noise = 0.01
    return model.eval()


X_PERIODIC = torch.tensor([[2.9, 0.1, 2.7], [0.2, 2.8, 0.3]], dtype=DTYPE)
B_PERIODIC = torch.full((3,), 1.5, dtype=DTYPE)


def test_default_ig_order_is_adaptive_and_agrees_with_a_high_order_reference():
    model = _periodic_model()
    ref = PosteriorIntegratedGradients(model, baseline=B_PERIODIC, order=1024)(X_PERIODIC)
    fixed32 = PosteriorIntegratedGradients(model, baseline=B_PERIODIC, order=32)(X_PERIODIC)  # explicit orders work
    ref_std, std32 = ref.variance.sqrt(), fixed32.variance.sqrt()
    assert ((std32 - ref_std).abs() / ref_std).max() > 0.01  # order 32 alone is visibly off here
    with warnings.catch_warnings():
        warnings.simplefilter("error", QuadratureWarning)
        ig = PosteriorIntegratedGradients(model, baseline=B_PERIODIC)
        attr = ig(X_PERIODIC)
    assert ig.last_order > 32 and attr.quadrature_order == ig.last_order
    scale = torch.maximum(ref.mean.abs(), ref_std).amax(-1, keepdim=True)
    assert ((attr.mean - ref.mean).abs() / scale).max() < 1e-6
    assert ((attr.variance.sqrt() - ref_std).abs() / scale).max() < 1e-6
    gaps = ig.completeness(X_PERIODIC)
    assert gaps.variance_gap.abs().max() < 1e-6 * gaps.prediction_difference_variance.abs().max()


def test_adaptive_order_warns_with_numbers_when_capped(monkeypatch):
    model = _periodic_model()
    monkeypatch.setattr(adaptive_module, "MAX_ORDER", 64)
    with pytest.warns(QuadratureWarning, match=r"order 64 .* change by up to"):
        PosteriorIntegratedGradients(model, baseline=B_PERIODIC)(X_PERIODIC)


def test_closed_form_kernels_do_not_iterate():
    g = torch.Generator().manual_seed(1)
    X = torch.rand(20, 2, generator=g, dtype=DTYPE)
    model = GP(X, X.sum(-1), gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())).to(DTYPE).eval()
    ig = PosteriorIntegratedGradients(model)
    assert ig(X[:2]).quadrature_order is None


def test_dense_cholesky_by_default_at_n_1000(monkeypatch):
    """n = 1000 > GPyTorch's max_cholesky_size (800): the attribution GP factors C itself, no CG at all."""
    g = torch.Generator().manual_seed(2)
    n, D = 1000, 2
    X = torch.rand(n, D, generator=g, dtype=DTYPE)
    y = torch.sin(4 * X[:, 0]) + X[:, 1] + 0.05 * torch.randn(n, generator=g, dtype=DTYPE)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D))
    model = GP(X, y, kernel, gpytorch.means.ZeroMean()).to(DTYPE)
    kernel.base_kernel.lengthscale = torch.tensor([0.3, 0.5])
    model.likelihood.noise = 0.01
    model.eval()

    def no_cg(*args, **kwargs):
        raise AssertionError("CG was used")

    monkeypatch.setattr(linear_operator.utils, "linear_cg", no_cg)
    xs = torch.rand(4, D, generator=g, dtype=DTYPE)
    # GPyTorch's own default (800; importing BoTorch raises it to 4096)
    with gpytorch.settings.max_cholesky_size(800):
        assert n <= gpytorch_explain.settings.max_cholesky_size.value()
        post = PosteriorGradient(model)(xs)
    assert post.lazy_covariance_matrix.factor_type == "cholesky"
    mean, cov = post.mean, post.covariance_matrix
    # dense reference: C = K + σ²I solved directly; derived blocks from the closed forms
    with torch.no_grad():
        C = kernel(X).to_dense() + model.likelihood.noise * torch.eye(n, dtype=DTYPE)
        derived = DerivedCovariance(kernel, GradientFunctional())
        B = derived.cross(xs, X).reshape(-1, n)  # (m·D, n)
        ref_mean = (B @ torch.linalg.solve(C, y)).reshape(4, D)
        ref_cov = derived.joint(xs, xs).reshape(4 * D, 4 * D) - B @ torch.linalg.solve(C, B.mT)
    assert torch.allclose(mean, ref_mean, rtol=1e-8, atol=1e-8 * ref_mean.abs().max().item())
    assert torch.allclose(cov, ref_cov, rtol=1e-7, atol=1e-8 * ref_cov.abs().max().item())


@pytest.mark.parametrize("change", ["noise", "outputscale", "lengthscale"])
def test_hyperparameter_changes_in_eval_mode_rebuild_caches(change):
    g = torch.Generator().manual_seed(3)
    X = torch.rand(30, 2, generator=g, dtype=DTYPE)
    y = torch.sin(3 * X[:, 0]) + X[:, 1]
    model = GP(X, y, gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())).to(DTYPE).eval()
    model.likelihood.noise = 0.01
    xs = torch.rand(3, 2, generator=g, dtype=DTYPE)
    ig = PosteriorIntegratedGradients(model)
    with torch.no_grad():
        model(xs)  # a prediction builds GPyTorch's caches
        before = ig(xs)
    if change == "noise":
        model.likelihood.noise = 0.5
    elif change == "outputscale":
        model.covar_module.outputscale = 3.0
    else:
        model.covar_module.base_kernel.lengthscale = 0.2
    after = ig(xs)
    fresh_model = copy.deepcopy(model)
    fresh_model.prediction_strategy = None
    fresh = PosteriorIntegratedGradients(fresh_model)(xs)
    assert not torch.allclose(before.mean, fresh.mean)  # the change matters
    assert torch.allclose(after.mean, fresh.mean, rtol=1e-10, atol=1e-12)
    assert torch.allclose(after.covariance_matrix, fresh.covariance_matrix, rtol=1e-10, atol=1e-12)
    # a second object on the same model (its first call) is not fooled by caches from before either
    assert torch.allclose(PosteriorGradient(model)(xs).mean, PosteriorGradient(fresh_model)(xs).mean, rtol=1e-10)


def test_clear_errors_for_half_precision_and_dimensions():
    X = torch.rand(10, 2, dtype=DTYPE)
    model = GP(X, X.sum(-1), gpytorch.kernels.RBFKernel()).to(DTYPE).eval()
    pg = PosteriorGradient(model)
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(TypeError, match="float32 or float64"):
            pg(torch.rand(3, 2).to(dtype))
    with pytest.raises(ValueError, match="3 columns but the model's inputs have D = 2"):
        pg(torch.rand(3, 3, dtype=DTYPE))
    with pytest.raises(ValueError, match="no points"):
        pg(torch.rand(0, 2, dtype=DTYPE))
    with pytest.raises(ValueError, match="order must be a positive integer"):
        PosteriorIntegratedGradients(model, order=0)
    with pytest.raises(ValueError, match="method must be"):
        PosteriorGradient(model, method="numeric")


def test_attribution_plots_show_one_std_and_say_so():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from gpytorch_explain.attribution import plot_attribution_bars, plot_attribution_path

    X = torch.rand(15, 2, dtype=DTYPE)
    model = GP(X, X[:, 0] - X[:, 1], gpytorch.kernels.RBFKernel()).to(DTYPE).eval()
    ig = PosteriorIntegratedGradients(model)
    attr = ig(X[:2])
    ax = plot_attribution_bars(attr, 0, ["a", "b"])
    assert "±1 posterior std" in ax.get_xlabel()
    from matplotlib.container import ErrorbarContainer

    err = next(c for c in ax.containers if isinstance(c, ErrorbarContainer))  # the error bars are 1 std
    segs = err.lines[2][0].get_segments()
    widths = sorted(abs(s[1][0] - s[0][0]) / 2 for s in segs)
    std = attr.variance[0].sqrt().sort().values
    assert torch.allclose(torch.tensor(widths, dtype=DTYPE), std, rtol=1e-6)
    ax2 = plot_attribution_path(ig, X[0], num=5)
    assert "±1 posterior std" in ax2.get_ylabel()
    assert ax2.get_legend() is not None and "band" in ax2.get_legend().get_title().get_text()


def test_memory_and_cg_path_are_announced(monkeypatch):
    import gpytorch_explain.attribution.fallback as fallback_module

    g = torch.Generator().manual_seed(5)
    X = torch.rand(40, 2, generator=g, dtype=DTYPE)
    model = GP(X, X.sum(-1), gpytorch.kernels.RBFKernel()).to(DTYPE).eval()
    xs = X[:2] + 0.01
    monkeypatch.setattr(fallback_module, "available_memory", lambda device: 1000)  # 1 kB free
    with pytest.raises(MemoryError, match=r"(?s)40 x 40 training covariance.*SGPR"):
        PosteriorGradient(model)(xs)
    with pytest.raises(MemoryError, match=r"(?s)autograd fallback.*fewer points"):
        PosteriorGradient(model, method="autograd")(xs)
    monkeypatch.undo()
    model.prediction_strategy = None
    with (
        gpytorch.settings.max_cholesky_size(0),
        gpytorch_explain.settings.max_cholesky_size(0),
        pytest.warns(UserWarning, match=r"(?s)n = 40 training points is above max_cholesky_size.*fast_pred_var"),
    ):
        PosteriorGradient(model)(xs)
