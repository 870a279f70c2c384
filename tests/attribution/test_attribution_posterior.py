"""Attribution GPs of trained ExactGPs against independent brute force (float64).

* The gradient GP against central finite differences of GPyTorch's own posterior mean and covariance.
* Integrated gradients against high-order Gauss–Legendre quadrature of the (verified) gradient GP along
  the path, jointly over points and features, and against Monte Carlo over posterior function samples
  (finite differences of sampled functions along the path; tolerance in standard errors).
* Completeness in mean and in distribution, stability cases, every supported kernel and mean.
"""

from __future__ import annotations

import math

import gpytorch
import numpy as np
import pytest
import torch

import gpytorch_explain
from gpytorch_explain import PosteriorGradient, PosteriorIntegratedGradients
from tests.helpers import assert_rel_close as _rel_close

DTYPE = torch.float64


class ExactModel(gpytorch.models.ExactGP):
    def __init__(self, x, y, kernel, mean=None):
        batch = y.shape[:-1] if y is not None else torch.Size()
        likelihood = gpytorch.likelihoods.GaussianLikelihood(batch_shape=batch)
        super().__init__(x, y, likelihood)
        self.mean_module = mean if mean is not None else gpytorch.means.ZeroMean()
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _kernel(name: str, D: int):
    k = gpytorch.kernels
    if name == "rbf":
        kern = k.ScaleKernel(k.RBFKernel())
        kern.base_kernel.lengthscale = 0.8
        kern.outputscale = 1.3
    elif name == "ard":
        kern = k.ScaleKernel(k.RBFKernel(ard_num_dims=D))
        kern.base_kernel.lengthscale = torch.linspace(0.6, 1.4, D)
        kern.outputscale = 0.9
    elif name == "linear":
        kern = k.LinearKernel()
        kern.variance = 0.7
    elif name == "rff":
        torch.manual_seed(3)
        kern = k.ScaleKernel(k.RFFKernel(num_samples=40))
        kern.base_kernel.lengthscale = 0.9
    elif name == "rbf+linear":
        rbf = k.RBFKernel()
        rbf.lengthscale = 0.7
        lin = k.LinearKernel()
        lin.variance = 0.3
        # in this order GPyTorch sums the two as a SumLinearOperator; rbf + lin adds the linear part as a low-rank
        # update of a root decomposition of the RBF matrix, singular at the finite-difference points (1e-4 apart):
        # a Cholesky with jitter in the reference posterior
        kern = lin + rbf
    elif name == "matern52":
        kern = k.ScaleKernel(k.MaternKernel(nu=2.5, ard_num_dims=D))
        kern.base_kernel.lengthscale = torch.linspace(0.8, 1.2, D)
    elif name == "matern32":
        kern = k.MaternKernel(nu=1.5)
        kern.lengthscale = 1.1
    elif name == "rq":
        kern = k.RQKernel()
        kern.lengthscale = 0.9
        kern.alpha = 1.7
    elif name == "periodic":
        kern = k.PeriodicKernel()
        kern.lengthscale = 1.2
        kern.period_length = 2.5
    elif name == "product":
        a = k.RBFKernel(active_dims=[0])
        a.lengthscale = 0.9
        b = k.MaternKernel(nu=2.5, active_dims=list(range(1, D)))
        b.lengthscale = 1.3
        kern = a * b
    else:
        raise ValueError(name)
    return kern


def _model(kernel_name="ard", mean="zero", n=14, D=3, seed=0, batch=()):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(*batch, n, D, generator=gen, dtype=DTYPE) * 2 - 1
    y = (
        torch.sin(2 * x[..., 0]) * x[..., 1]
        + 0.3 * x[..., -1]
        + 0.05 * torch.randn(*batch, n, generator=gen, dtype=DTYPE)
    )
    means = {
        "zero": gpytorch.means.ZeroMean(),
        "constant": gpytorch.means.ConstantMean(),
        "linear": gpytorch.means.LinearMean(D),
    }
    mean_module = means[mean]
    if mean == "constant":
        mean_module.constant = 0.4
    if mean == "linear":
        mean_module.weights.data = torch.linspace(-0.5, 0.8, D).unsqueeze(-1)
        mean_module.bias.data.fill_(0.2)
    model = ExactModel(x, y, _kernel(kernel_name, D), mean_module).to(DTYPE)
    model.likelihood.noise = 0.04
    return model.eval(), x


def _posterior(model, pts):
    with torch.no_grad():
        out = model(pts)
    return out.mean, out.covariance_matrix


# =============================================================================================
# gradient GP vs finite differences of GPyTorch's posterior
# =============================================================================================
GRAD_KERNELS = ["rbf", "ard", "linear", "rff", "rbf+linear", "matern52", "matern32", "rq", "periodic", "product"]


@pytest.mark.parametrize("kernel_name", GRAD_KERNELS)
@pytest.mark.parametrize("mean", ["zero", "linear"])
def test_gradient_gp_matches_finite_differences(kernel_name, mean):
    model, X = _model(kernel_name, mean)
    D = X.size(-1)
    gen = torch.Generator().manual_seed(1)
    xs = torch.rand(3, D, generator=gen, dtype=DTYPE) * 2 - 1
    xs[2] = X[4]  # a training input: coincident points
    with torch.no_grad():
        grad = PosteriorGradient(model)(xs)
        cov = grad.covariance_matrix
    h = 1e-4
    eye = torch.eye(D, dtype=DTYPE)
    # all points x_p ± h e_i, jointly
    plus = (xs.unsqueeze(1) + h * eye).reshape(-1, D)
    minus = (xs.unsqueeze(1) - h * eye).reshape(-1, D)
    mean_pm, cov_pm = _posterior(model, torch.cat([plus, minus]))
    m3 = xs.size(0) * D
    fd_mean = (mean_pm[:m3] - mean_pm[m3:]) / (2 * h)
    c = cov_pm
    fd_cov = (c[:m3, :m3] - c[:m3, m3:] - c[m3:, :m3] + c[m3:, m3:]) / (4 * h * h)
    _rel_close(grad.mean.reshape(-1), fd_mean, 1e-6, "gradient mean vs FD")
    _rel_close(cov, fd_cov, 5e-4, "gradient covariance vs FD")  # FD of a covariance: O(h^2) + cancellation
    torch.testing.assert_close(grad.variance.reshape(-1), cov.diagonal())


# =============================================================================================
# IG vs quadrature of the gradient GP
# =============================================================================================
def _ig_by_quadrature(model, xs, baselines, nodes=120):
    """IG mean and joint covariance from the gradient GP at Gauss–Legendre nodes along each path."""
    t, w = np.polynomial.legendre.leggauss(nodes)
    t = torch.as_tensor((t + 1) / 2, dtype=DTYPE)
    w = torch.as_tensor(w / 2, dtype=DTYPE)
    m, D = xs.shape
    k = baselines.size(0)
    # path points: (k, m, nodes, D)
    delta = xs.unsqueeze(0) - baselines.unsqueeze(1)  # (k, m, D)
    pts = baselines[:, None, None, :] + t[None, None, :, None] * delta[:, :, None, :]
    with torch.no_grad():
        g = PosteriorGradient(model)(pts.reshape(-1, D))
        gm = g.mean.reshape(k, m, nodes, D)
        gc = g.covariance_matrix.reshape(k, m, nodes, D, k, m, nodes, D)
    # IG_i = mean_r Δ_ri Σ_t w_t ∂_i f(u_r(t))
    coef = w[None, None, :, None] * delta[:, :, None, :] / k  # (k, m, nodes, D)
    mean = (coef * gm).sum((0, 2))  # (m, D)
    cov = torch.einsum("rptd,rptdsque,sque->pdqe", coef, gc, coef)
    return mean, cov.reshape(m * D, m * D)


IG_KERNELS = ["rbf", "ard", "linear", "rff", "rbf+linear", "matern52"]


@pytest.mark.parametrize("kernel_name", IG_KERNELS)
@pytest.mark.parametrize("num_baselines", [1, 3])
def test_ig_matches_quadrature_of_gradient_gp(kernel_name, num_baselines):
    model, X = _model(kernel_name, "linear")
    D = X.size(-1)
    gen = torch.Generator().manual_seed(2)
    xs = torch.rand(3, D, generator=gen, dtype=DTYPE) * 2 - 1
    baselines = torch.rand(num_baselines, D, generator=gen, dtype=DTYPE) - 0.5
    with torch.no_grad():
        attr = PosteriorIntegratedGradients(model, baseline=baselines, order=64)(xs)
        cov = attr.covariance_matrix
    q_mean, q_cov = _ig_by_quadrature(model, xs, baselines)
    tol = 1e-9 if kernel_name in ("rbf", "ard", "linear", "rff", "rbf+linear") else 1e-6
    _rel_close(attr.mean, q_mean, tol, "IG mean vs quadrature")
    _rel_close(cov, q_cov, tol, "IG covariance vs quadrature")
    blocks = attr.lazy_covariance_matrix.point_blocks()
    ref_blocks = torch.stack([q_cov[p * D : (p + 1) * D, p * D : (p + 1) * D] for p in range(3)])
    _rel_close(blocks, ref_blocks, tol, "IG point blocks")


# =============================================================================================
# completeness
# =============================================================================================
@pytest.mark.parametrize("kernel_name", ["rbf", "ard", "linear", "rff", "rbf+linear", "matern52", "rq"])
@pytest.mark.parametrize("mean", ["zero", "constant", "linear"])
def test_completeness_in_mean_and_distribution(kernel_name, mean):
    model, X = _model(kernel_name, mean)
    gen = torch.Generator().manual_seed(3)
    xs = torch.rand(4, X.size(-1), generator=gen, dtype=DTYPE) * 2 - 1
    for baseline in (None, torch.rand(2, X.size(-1), generator=gen, dtype=DTYPE)):
        with torch.no_grad():
            gaps = PosteriorIntegratedGradients(model, baseline=baseline, order=48).completeness(xs)
        tol = 1e-10 if kernel_name not in ("matern52", "rq") else 1e-7
        scale_m = gaps.prediction_difference_mean.abs().max()
        scale_v = gaps.prediction_difference_variance.abs().max()
        assert gaps.mean_gap.abs().max() <= tol * max(1.0, scale_m), gaps
        assert gaps.variance_gap.abs().max() <= tol * max(1.0, scale_v), gaps


# =============================================================================================
# Monte Carlo over posterior function samples
# =============================================================================================
def test_ig_monte_carlo_over_posterior_samples():
    """IG computed on each posterior function sample (finite differences + Gauss–Legendre along the
    path) has the mean and covariance of the IG GP within 4.5 standard errors."""
    model, X = _model("ard", "zero", n=10, D=2)
    D = 2
    xs = torch.tensor([[0.7, -0.4], [-0.2, 0.5]], dtype=DTYPE)
    b = torch.tensor([0.1, 0.0], dtype=DTYPE)
    nodes, h = 16, 1e-3
    t, w = np.polynomial.legendre.leggauss(nodes)
    t = torch.as_tensor((t + 1) / 2, dtype=DTYPE)
    w = torch.as_tensor(w / 2, dtype=DTYPE)
    eye = torch.eye(D, dtype=DTYPE)
    delta = xs - b
    path = b + t[None, :, None] * delta[:, None, :]  # (m, nodes, D)
    pts = torch.stack([path[..., None, :] + h * eye, path[..., None, :] - h * eye], dim=0)  # (2, m, nodes, D, D)
    mean, cov = _posterior(model, pts.reshape(-1, D))
    gen = torch.Generator().manual_seed(5)
    L = torch.linalg.cholesky(cov + 1e-10 * torch.eye(cov.size(0), dtype=DTYPE))
    S = 20000
    f = mean + (L @ torch.randn(cov.size(0), S, generator=gen, dtype=DTYPE)).T  # (S, P)
    f = f.reshape(S, 2, 2, nodes, D)
    grads = (f[:, 0] - f[:, 1]) / (2 * h)  # (S, m, nodes, D): ∂_i f at path nodes
    ig = (grads * w[None, None, :, None]).sum(2) * delta  # (S, m, D)
    ig = ig.reshape(S, -1)
    with torch.no_grad():
        attr = PosteriorIntegratedGradients(model, baseline=b)(xs)
    mu, sigma = attr.mean.reshape(-1), attr.covariance_matrix
    emp_mean = ig.mean(0)
    emp_cov = torch.cov(ig.T)
    se_mean = (sigma.diagonal() / S).sqrt()
    assert ((emp_mean - mu).abs() / se_mean).max() < 4.5
    se_cov = ((sigma.diagonal()[:, None] * sigma.diagonal()[None, :] + sigma**2) / S).sqrt()
    assert ((emp_cov - sigma).abs() / se_cov).max() < 4.5
    # and the test can tell the posterior from the prior-scale covariance
    assert ((emp_cov - 2 * sigma).abs() / se_cov).max() > 4.5


# =============================================================================================
# stability
# =============================================================================================
@pytest.mark.parametrize("kernel_name", ["ard", "matern52"])
def test_stability_at_near_and_far_from_baseline(kernel_name):
    model, X = _model(kernel_name, "zero")
    D = X.size(-1)
    b = torch.zeros(D, dtype=DTYPE)
    direction = torch.linspace(0.3, 1.0, D, dtype=DTYPE)
    xs = torch.stack([b, b + 1e-8 * direction, b + 5.0 * direction, X[3]])
    ig = PosteriorIntegratedGradients(model, baseline=b)
    with torch.no_grad():
        attr = ig(xs)
        blocks = attr.lazy_covariance_matrix.point_blocks()
    assert torch.isfinite(attr.mean).all() and torch.isfinite(blocks).all()
    assert torch.equal(attr.mean[0], torch.zeros(D, dtype=DTYPE))
    assert torch.equal(blocks[0], torch.zeros(D, D, dtype=DTYPE))
    # x ≈ b: attribution ≈ Δ ⊙ ∇E[f](b), variance ≈ Δ Δᵀ ⊙ Cov(∇f(b))
    with torch.no_grad():
        g = PosteriorGradient(model)(b.unsqueeze(0))
    d = 1e-8 * direction
    _rel_close(attr.mean[1], d * g.mean[0], 1e-6, "IG near the baseline")
    gb = g.lazy_covariance_matrix.point_blocks()[0]
    _rel_close(blocks[1], d[:, None] * gb * d[None, :], 1e-6, "IG covariance near the baseline")
    # completeness far away and through a training input
    gaps = ig.completeness(xs)
    assert gaps.mean_gap.abs().max() < 1e-7 and gaps.variance_gap.abs().max() < 1e-7


# =============================================================================================
# batches, dtype, GPX
# =============================================================================================
def test_batch_model():
    model, X = _model("ard", "zero", batch=(2,))
    xs = torch.rand(3, X.size(-1), dtype=DTYPE)
    b = torch.zeros(X.size(-1), dtype=DTYPE)
    with torch.no_grad():
        attr = PosteriorIntegratedGradients(model, baseline=b)(xs)
        grad = PosteriorGradient(model)(xs)
    assert attr.mean.shape == (2, 3, X.size(-1)) and grad.mean.shape == (2, 3, X.size(-1))
    assert attr.variance.shape == (2, 3, X.size(-1))
    # each batch member equals a single model with that member's data and hyperparameters
    for i in range(2):
        single = ExactModel(X[i], model.train_targets[i], _kernel("ard", X.size(-1))).to(DTYPE)
        single.likelihood.noise = 0.04
        single.eval()
        with torch.no_grad():
            ref = PosteriorIntegratedGradients(single, baseline=b)(xs)
        _rel_close(attr.mean[i], ref.mean, 1e-10, "batch mean")
        _rel_close(attr.covariance_matrix[i], ref.covariance_matrix, 1e-10, "batch covariance")


def test_float32_model_runs():
    model, X = _model("ard", "constant")
    model = model.float()
    xs = torch.rand(3, X.size(-1))
    with torch.no_grad():
        attr = PosteriorIntegratedGradients(model)(xs)
        gaps = PosteriorIntegratedGradients(model).completeness(xs)
    assert attr.mean.dtype == torch.float32 and torch.isfinite(attr.variance).all()
    assert gaps.mean_gap.abs().max() < 1e-4


def test_a_linear_kernel_mean_comes_from_the_weight_space_cache():
    """A bare LinearKernel (GPyTorch's LinearPredictionStrategy): the gradient and IG means equal the float64 ones to
    float32 accuracy (through the data-space sum of alpha they were 2.3e-4 off for a rank-3-plus-noise 0.01
    matrix), and in float64 and for a batch model they equal the data-space sums (the old path) to round-off."""
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(40, 3, generator=gen, dtype=DTYPE)
    y = torch.sin(3 * X[:, 0]) + X[:, 1]
    xs = torch.rand(4, 3, generator=gen, dtype=DTYPE)
    b = torch.full((3,), 0.5, dtype=DTYPE)

    def model_of(dtype, batch=()):
        m = ExactModel(X.expand(*batch, 40, 3), y.expand(*batch, 40), gpytorch.kernels.LinearKernel(), None)
        m = m.to(dtype)
        m.likelihood.noise = 0.01
        m.covar_module.variance = 0.7
        return m.eval()

    f64 = model_of(DTYPE)
    alpha = torch.linalg.solve(0.7 * X @ X.T + 0.01 * torch.eye(40, dtype=DTYPE), y)  # zero mean
    weight = 0.7 * X.T @ alpha  # the gradient of a linear GP's posterior mean, everywhere
    with torch.no_grad():
        _rel_close(PosteriorGradient(f64)(xs).mean, weight.expand(4, 3), 1e-10, "float64 gradient")
        _rel_close(PosteriorIntegratedGradients(f64, baseline=b)(xs).mean, (xs - b) * weight, 1e-10, "float64 IG")
        f32 = model_of(torch.float32)
        _rel_close(PosteriorGradient(f32)(xs.float()).mean.double(), weight.expand(4, 3), 1e-5, "float32 gradient")
        ig32 = PosteriorIntegratedGradients(f32, baseline=b.float())(xs.float()).mean.double()
        _rel_close(ig32, (xs - b) * weight, 1e-5, "float32 IG")
        batch = PosteriorGradient(model_of(DTYPE, (2,)))(xs)
        assert batch.mean.shape == (2, 4, 3)
        _rel_close(batch.mean, weight.expand(2, 4, 3), 1e-10, "batch gradient")


def test_gpx_model_attributions():
    from gpytorch_explain import GPXModel

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(25, 2, generator=gen, dtype=DTYPE)
    y = x[:, 0] * torch.sin(x[:, 1])
    model = GPXModel(x, y).fit(max_iter=15)
    xs = torch.randn(3, 2, generator=gen, dtype=DTYPE)
    with torch.no_grad():
        grad = PosteriorGradient(model)(xs)
        ig = PosteriorIntegratedGradients(model)
        gaps = ig.completeness(xs)
        # E[∇f] = ∇ E[f]: finite differences of GPX's predictive mean (the weight noise has mean 0)
        h = 1e-5
        fd = torch.stack(
            [(model(xs + h * e).mean - model(xs - h * e).mean) / (2 * h) for e in torch.eye(2, dtype=DTYPE)], -1
        )
    _rel_close(grad.mean, fd, 1e-6, "GPX gradient mean")
    assert gaps.mean_gap.abs().max() < 1e-8 and gaps.variance_gap.abs().max() < 1e-8
    zsep = GPXModel(x, y, torch.randn(25, 3, generator=gen, dtype=DTYPE))
    with pytest.raises(NotImplementedError, match="z = x"):
        PosteriorGradient(zsep)


# =============================================================================================
# bad input
# =============================================================================================
def test_bad_input_errors():
    from gpytorch_explain import ModelStateError

    model, X = _model("ard", "zero")
    D = X.size(-1)
    with pytest.raises(ValueError, match="baseline"):
        PosteriorIntegratedGradients(model, baseline=torch.zeros(D + 1, dtype=DTYPE))
    with pytest.raises(ValueError, match="baseline"):
        PosteriorIntegratedGradients(model, baseline=torch.zeros(2, 2, D, dtype=DTYPE))
    with pytest.raises(ValueError, match="NaN"):
        PosteriorIntegratedGradients(model, baseline=torch.full((D,), math.nan, dtype=DTYPE))
    with pytest.raises(TypeError, match="dtype"):
        PosteriorIntegratedGradients(model, baseline=torch.zeros(D))
    ig = PosteriorIntegratedGradients(model)
    with pytest.raises(ValueError, match="columns"):
        ig(torch.zeros(2, D + 1, dtype=DTYPE))
    with pytest.raises(ValueError, match="NaN"):
        ig(torch.full((2, D), math.inf, dtype=DTYPE))
    with pytest.raises(ValueError, match=r"\(m, D\)"):
        ig(torch.zeros(D, dtype=DTYPE))
    with pytest.raises(TypeError, match="floating"):
        ig(torch.zeros(2, D, dtype=torch.long))
    model.train()
    with pytest.raises(ModelStateError, match="eval"):
        ig(torch.zeros(2, D, dtype=DTYPE))
    model.eval()
    empty = ExactModel(None, None, _kernel("ard", D)).to(DTYPE).eval()
    with pytest.raises(ModelStateError, match="training data"):
        PosteriorGradient(empty)(torch.zeros(2, D, dtype=DTYPE))
    m12, X12 = _model("rbf", "zero")
    m12.covar_module = gpytorch.kernels.MaternKernel(nu=0.5).to(DTYPE)
    with pytest.raises((NotImplementedError, ValueError), match="(?i)differentiable|nu"):
        PosteriorGradient(m12)(X12[:2])
    with pytest.raises(TypeError, match="ExactGP"):
        PosteriorGradient(torch.nn.Linear(2, 1))


def test_approximate_gp_without_covar_module_takes_the_fallback():
    """A variational model whose prior is not `covar_module` has no closed forms: the autograd fallback is announced
    and serves it, with the inducing points' mean as the default baseline (its values are checked against the closed
    forms in tests/attribution/test_attribution_fallback.py)."""

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self):
            inducing = torch.rand(5, 2, dtype=DTYPE)
            dist = gpytorch.variational.CholeskyVariationalDistribution(5)
            strategy = gpytorch.variational.VariationalStrategy(self, inducing, dist)
            super().__init__(strategy)

        def forward(self, x):  # pragma: no cover - not called by the constructor
            raise AssertionError

    model = SVGP()
    with pytest.warns(gpytorch_explain.AutogradFallbackWarning, match="no `covar_module` Kernel"):
        ig = PosteriorIntegratedGradients(model)
    assert ig.method == "autograd"
    inducing = model.variational_strategy.inducing_points.detach()
    torch.testing.assert_close(ig.functional.baselines.reshape(-1), inducing.mean(0), rtol=0, atol=1e-12)


def test_quadrature_error_estimate():
    model, X = _model("matern52", "zero")
    xs = torch.rand(2, X.size(-1), dtype=DTYPE)
    ig = PosteriorIntegratedGradients(model, order=32)
    mean_err, var_err = ig.quadrature_error(xs)
    assert mean_err.shape == (2, X.size(-1)) and mean_err.max() < 1e-8 and var_err.max() < 1e-8
    coarse = PosteriorIntegratedGradients(model, order=4)
    mean_err2, var_err2 = coarse.quadrature_error(xs)
    assert max(mean_err2.max(), var_err2.max()) > 100 * max(mean_err.max(), var_err.max(), 1e-14)
    rbf_model, _ = _model("ard", "zero")
    e_mean, e_var = PosteriorIntegratedGradients(rbf_model).quadrature_error(xs)
    assert e_mean.max() == 0 and e_var.max() == 0  # closed form: no quadrature


def test_attribution_plots(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from gpytorch_explain.attribution import plot_attribution_bars, plot_attribution_path

    model, X = _model("ard", "zero")
    D = X.size(-1)
    ig = PosteriorIntegratedGradients(model, baseline=torch.zeros(D, dtype=DTYPE))
    with torch.no_grad():
        attr = ig(X[:2])
    ax = plot_attribution_bars(attr, 1, [f"f{j}" for j in range(D)])
    assert sorted(t.get_text() for t in ax.get_yticklabels()) == [f"f{j}" for j in range(D)]
    widths = sorted(abs(p.get_width()) for p in ax.patches)
    np.testing.assert_allclose(widths, sorted(attr.mean[1].abs().tolist()))
    ax.figure.savefig(tmp_path / "bars.png")
    ax = plot_attribution_path(ig, X[0], num=12)
    assert len(ax.lines) >= D and len(ax.collections) == D  # one ±2σ band per feature
    ax.figure.savefig(tmp_path / "path.png")
    with pytest.raises(ValueError, match="single baseline"):
        plot_attribution_path(PosteriorIntegratedGradients(model, baseline=torch.zeros(2, D, dtype=DTYPE)), X[0])


def test_iterative_and_love_paths():
    """Above max_cholesky_size: CG solves (exact up to CG) or, under fast_pred_var, LOVE roots."""
    import warnings

    model, X = _model("ard", "zero", n=40)
    xs = torch.rand(3, X.size(-1), dtype=DTYPE)
    with torch.no_grad():
        exact = PosteriorIntegratedGradients(model, baseline=torch.zeros(X.size(-1), dtype=DTYPE))(xs)
        exact_cov = exact.covariance_matrix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with (
            torch.no_grad(),
            gpytorch.settings.max_cholesky_size(0),
            gpytorch_explain.settings.max_cholesky_size(0),
            gpytorch.settings.eval_cg_tolerance(1e-10),
        ):
            model.prediction_strategy = None
            ig = PosteriorIntegratedGradients(model, baseline=torch.zeros(X.size(-1), dtype=DTYPE))
            cg = ig(xs)
            assert cg.lazy_covariance_matrix.factor_type == "solve"
            _rel_close(cg.mean, exact.mean, 1e-4, "CG mean")  # CG stalls near 1e-6 relative residual
            _rel_close(cg.covariance_matrix, exact_cov, 1e-4, "CG covariance")
            model.prediction_strategy = None
            with gpytorch.settings.fast_pred_var(), gpytorch.settings.max_root_decomposition_size(40):
                love = ig(xs)
                assert love.lazy_covariance_matrix.factor_type == "root"
                _rel_close(love.covariance_matrix, exact_cov, 1e-5, "full-rank LOVE covariance")
    model.prediction_strategy = None


def test_zero_variance_at_the_baseline_is_exact_and_quiet():
    import warnings

    model, X = _model("ard", "zero")
    b = X[:2].mean(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attr = PosteriorIntegratedGradients(model, baseline=b)(torch.stack([b, X[0]]))
        var = attr.variance
    assert isinstance(attr, gpytorch.distributions.MultitaskMultivariateNormal)
    assert torch.equal(var[0], torch.zeros_like(var[0])) and (var[1] > 0).all()


def test_derived_kernels_are_gpytorch_kernels():
    from gpytorch_explain.kernels import GradientKernel, IntegratedGradientKernel

    base = _kernel("ard", 3).to(DTYPE)
    gen = torch.Generator().manual_seed(9)
    x1 = torch.rand(4, 3, generator=gen, dtype=DTYPE)
    x2 = torch.rand(2, 3, generator=gen, dtype=DTYPE)
    gk = GradientKernel(base)
    K = gk(x1, x2).to_dense()
    assert K.shape == (12, 6)
    # ∂_i ∂'_j k by central differences of the base kernel
    h = 1e-4
    eye = torch.eye(3, dtype=DTYPE)
    ref = torch.zeros(4, 3, 2, 3, dtype=DTYPE)
    with torch.no_grad():
        for i in range(3):
            for j in range(3):
                kpp = base(x1 + h * eye[i], x2 + h * eye[j]).to_dense()
                kpm = base(x1 + h * eye[i], x2 - h * eye[j]).to_dense()
                kmp = base(x1 - h * eye[i], x2 + h * eye[j]).to_dense()
                kmm = base(x1 - h * eye[i], x2 - h * eye[j]).to_dense()
                ref[:, i, :, j] = (kpp - kpm - kmp + kmm) / (4 * h * h)
    _rel_close(K.detach(), ref.reshape(12, 6), 1e-6, "gradient kernel")
    torch.testing.assert_close(gk(x1, diag=True), gk(x1).to_dense().diagonal())
    igk = IntegratedGradientKernel(base, torch.zeros(3, dtype=DTYPE))
    assert igk(x1).to_dense().shape == (12, 12) and igk.cross_covariance(x1, x2).shape == (12, 2)
    # the kernel shares the base kernel's hyperparameters
    assert any(p is base.raw_outputscale for p in igk.parameters())


@pytest.mark.parametrize("functional", ["gradient", "ig"])
@pytest.mark.parametrize("batched_points", [False, True])
def test_batch_indexed_covariance_is_that_of_the_member_model(functional, batched_points):
    # linear_operator's batch indexing rebuilt the operator from its indexed arguments but kept the derived prior's
    # kernel with the whole batch: member 1's rows met member 0's prior (errors ~5 with distinct hyperparameters),
    # or unbatched points raised. Reference: a model of member b alone, with its data and hyperparameters.
    gen = torch.Generator().manual_seed(21)
    D = 3
    x = torch.rand(2, 12, D, generator=gen, dtype=DTYPE) * 2 - 1
    y = torch.sin(2 * x[..., 0]) + 0.3 * x[..., 1] + 0.05 * torch.randn(2, 12, generator=gen, dtype=DTYPE)
    lengthscales = torch.tensor([[[0.5, 1.0, 2.0]], [[1.5, 0.7, 3.0]]], dtype=DTYPE)
    outputscales = torch.tensor([1.0, 3.0], dtype=DTYPE)
    noises = torch.tensor([[0.04], [0.1]], dtype=DTYPE)

    def model_of(xb, yb, ls, os, noise, batch):
        kernel = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(ard_num_dims=D, batch_shape=batch), batch_shape=batch
        )
        model = ExactModel(xb, yb, kernel).to(DTYPE)
        kernel.base_kernel.lengthscale, kernel.outputscale, model.likelihood.noise = ls, os, noise
        return model.eval()

    batch_model = model_of(x, y, lengthscales, outputscales, noises, torch.Size([2]))
    gen_pts = torch.Generator().manual_seed(22)
    pts = torch.rand(4, D, generator=gen_pts, dtype=DTYPE) * 2 - 1
    baseline = torch.zeros(D, dtype=DTYPE)

    def attribution(model):
        if functional == "gradient":
            return PosteriorGradient(model)
        return PosteriorIntegratedGradients(model, baseline=baseline)

    dist = attribution(batch_model)(pts.expand(2, 4, D) if batched_points else pts)
    cov = dist.lazy_covariance_matrix
    for b in range(2):
        single = model_of(x[b], y[b], lengthscales[b], outputscales[b], noises[b], torch.Size())
        ref = attribution(single)(pts)
        _rel_close(cov[b].to_dense(), ref.covariance_matrix, 1e-9, f"covariance of member {b}")
        _rel_close(cov[b, 2:7, :].to_dense(), ref.covariance_matrix[2:7, :], 1e-9, f"rows of member {b}")
        _rel_close(dist[b].variance, ref.variance, 1e-9, f"variance of member {b}")
        _rel_close(dist[b].mean, ref.mean, 1e-9, f"mean of member {b}")
