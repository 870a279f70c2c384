"""Attribution GPs at scale (float64): SGPR models, and the bounded-memory (chunked) exact path.

SGPR (``ExactGP`` with an ``InducingPointKernel`` ``covar_module``):

* the gradient GP against central finite differences of GPyTorch's own SGPR predictive: the mean directly, the
  covariance of the smooth posterior process (GPyTorch's joint predictive with its test prior, the Nyström kernel
  with or without the diagonal correction, replaced by the exact base kernel; see ``attribution/sgpr.py``);
* gradients and IG against the dense Titsias / FITC formulas with the Nyström matrix written out (``n x n``);
* IG against Gauss–Legendre quadrature of the (verified) gradient GP, and completeness;
* inducing points at the training inputs reproduce the exact GP's attributions;
* heteroscedastic noise, every supported mean, batches, float32, caching and its invalidation.

Exact GPs: forcing tiny chunks (lazy covariance rows) gives the unchunked results for every factor type.
"""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch
from linear_operator import to_dense

import gpytorch_explain
import gpytorch_explain.attribution._quadrature as chunking_module
import gpytorch_explain.attribution.sgpr as sgpr_module
from gpytorch_explain import GPXModel, PosteriorGradient, PosteriorIntegratedGradients
from gpytorch_explain.attribution import DerivedCovariance, GradientFunctional, IntegratedGradientFunctional
from gpytorch_explain.errors import ModelStateError
from tests.helpers import assert_rel_close as _rel_close

DTYPE = torch.float64


class SGPRModel(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood, base, inducing, mean):
        super().__init__(x, y, likelihood)
        self.mean_module = mean
        self.covar_module = gpytorch.kernels.InducingPointKernel(base, inducing_points=inducing, likelihood=likelihood)

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


class ExactModel(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood, kernel, mean):
        super().__init__(x, y, likelihood)
        self.mean_module = mean
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _data(n, D, seed=0, batch=()):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(*batch, n, D, generator=gen, dtype=DTYPE) * 2 - 1
    y = torch.sin(2 * x[..., 0]) * x[..., 1] + 0.3 * x[..., -1] + 0.05 * torch.randn(*batch, n, generator=gen).to(x)
    return x, y


def _mean(name, D, batch=()):
    if name == "zero":
        return gpytorch.means.ZeroMean()
    if name == "constant":
        mean = gpytorch.means.ConstantMean(batch_shape=torch.Size(batch))
        mean.constant = 0.4
        return mean
    mean = gpytorch.means.LinearMean(D)
    mean.weights.data = torch.linspace(-0.5, 0.8, D).unsqueeze(-1)
    mean.bias.data.fill_(0.2)
    return mean


def _base(D, kind="ard", batch=()):
    k = gpytorch.kernels
    batch = torch.Size(batch)
    if kind == "ard":
        base = k.ScaleKernel(k.RBFKernel(ard_num_dims=D, batch_shape=batch), batch_shape=batch)
        base.base_kernel.lengthscale = torch.linspace(0.5, 0.9, D)
        base.outputscale = 1.3
    else:
        base = k.ScaleKernel(k.MaternKernel(nu=2.5, ard_num_dims=D))
        base.base_kernel.lengthscale = torch.linspace(0.6, 1.0, D)
        base.outputscale = 0.9
    return base


def _likelihood(kind, n, batch=()):
    if kind == "fixed":
        gen = torch.Generator().manual_seed(5)
        noise = 0.01 + 0.08 * torch.rand(*batch, n, generator=gen, dtype=DTYPE)
        return gpytorch.likelihoods.FixedNoiseGaussianLikelihood(noise=noise)
    lik = gpytorch.likelihoods.GaussianLikelihood(batch_shape=torch.Size(batch))
    lik.noise = 0.05
    return lik


def _sgpr(n=30, M=8, D=2, mean="linear", lik="gaussian", kind="ard", inducing=None, batch=(), seed=0):
    x, y = _data(n, D, seed=seed, batch=batch)
    if inducing is None:
        gen = torch.Generator().manual_seed(seed + 11)
        inducing = torch.rand(*batch, M, D, generator=gen, dtype=DTYPE) * 2.2 - 1.1
    likelihood = _likelihood(lik, n, batch)
    model = SGPRModel(x, y, likelihood, _base(D, kind, batch), inducing.clone(), _mean(mean, D, batch))
    return model.to(DTYPE).eval(), x


def _process(model, pts):
    """GPyTorch's SGPR predictive at ``pts``, with its test prior replaced by the exact base kernel (brute force)."""
    with torch.no_grad():
        out = model(pts)
        test_prior = to_dense(model.covar_module(pts))  # Nyström (+ diagonal correction when on)
        exact_prior = to_dense(model.covar_module.base_kernel(pts))
    return out.mean, out.covariance_matrix - test_prior + exact_prior


def _fd_gradient(model, xs, h=1e-4):
    m, D = xs.shape[-2:]
    eye = torch.eye(D, dtype=DTYPE)
    plus = (xs.unsqueeze(-2) + h * eye).reshape(*xs.shape[:-2], -1, D)
    minus = (xs.unsqueeze(-2) - h * eye).reshape(*xs.shape[:-2], -1, D)
    mean, c = _process(model, torch.cat([plus, minus], dim=-2))
    k = m * D
    fd_mean = (mean[..., :k] - mean[..., k:]) / (2 * h)
    fd_cov = (c[..., :k, :k] - c[..., :k, k:] - c[..., k:, :k] + c[..., k:, k:]) / (4 * h * h)
    return fd_mean, fd_cov


def _noise(model):
    lik = model.likelihood
    n = model.train_inputs[0].size(-2)
    if isinstance(lik, gpytorch.likelihoods.FixedNoiseGaussianLikelihood):
        return lik.noise
    return lik.noise.expand(*lik.noise.shape[:-1], n)


def _dense_titsias(model, functional, xs, correction=True):
    """Attribution GP of the SGPR posterior with the Nyström matrix Q written out (``n x n`` dense algebra)."""
    with torch.no_grad():
        ipk = model.covar_module
        base, U = ipk.base_kernel, ipk.inducing_points
        X, y = model.train_inputs[0], model.train_targets
        n = X.size(-2)
        Kuu = to_dense(base(U, U))
        Kux = to_dense(base(U, X))
        T = torch.linalg.solve(Kuu, Kux)  # K_UU⁻¹ K_UX
        Q = Kux.mT @ T
        lam = _noise(model)
        if correction:
            lam = lam + (base(X, diag=True) - Q.diagonal(dim1=-2, dim2=-1)).clamp_min(0)
        C = Q + torch.diag_embed(lam.expand(*Q.shape[:-2], n))
        resid = y - model.mean_module(X)
        derived = DerivedCovariance(base, functional)
        BQ = derived.cross(xs, U) @ T.unsqueeze(-3)  # derived cross-covariance with Q, (…, m, D, n)
        mean = (BQ @ torch.linalg.solve(C, resid.unsqueeze(-1)).unsqueeze(-3)).squeeze(-1)
        mean_module = model.mean_module
        if isinstance(mean_module, gpytorch.means.LinearMean):
            w = mean_module.weights.squeeze(-1)
            if isinstance(functional, GradientFunctional):
                mean = mean + w
            else:
                mean = mean + ((xs.unsqueeze(0) - functional.baselines.unsqueeze(1)) * w).mean(0)
        m, D = xs.shape[-2:]
        Bf = BQ.reshape(*BQ.shape[:-3], m * D, n)
        cov = derived.joint(xs, xs).reshape(*BQ.shape[:-3], m * D, m * D) - Bf @ torch.linalg.solve(C, Bf.mT)
    return mean, cov


def _points(m, D, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(m, D, generator=gen, dtype=DTYPE) * 2 - 1


# =============================================================================================
# SGPR: gradient GP vs finite differences of GPyTorch's predictive, and vs the dense formula
# =============================================================================================
@pytest.mark.parametrize(
    "mean,lik,kind,correction",
    [
        ("linear", "gaussian", "ard", True),
        ("constant", "fixed", "ard", True),
        ("zero", "gaussian", "ard", False),
        ("linear", "fixed", "matern52", True),
    ],
)
def test_sgpr_gradient_matches_finite_differences(mean, lik, kind, correction):
    with gpytorch.settings.sgpr_diagonal_correction(correction):
        model, X = _sgpr(mean=mean, lik=lik, kind=kind)
        xs = _points(3, 2)
        xs[2] = X[4]  # a training input
        with torch.no_grad():
            grad = PosteriorGradient(model)(xs)
            cov = grad.covariance_matrix
        fd_mean, fd_cov = _fd_gradient(model, xs)
        d_mean, d_cov = _dense_titsias(model, GradientFunctional(), xs, correction=correction)
    _rel_close(grad.mean.reshape(-1), fd_mean, 1e-6, "gradient mean vs FD")
    _rel_close(cov, fd_cov, 5e-4, "gradient covariance vs FD")
    _rel_close(grad.mean, d_mean, 1e-9, "gradient mean vs dense Titsias")
    _rel_close(cov, d_cov, 1e-9, "gradient covariance vs dense Titsias")
    torch.testing.assert_close(grad.variance.reshape(-1), cov.diagonal())


def test_sgpr_latent_variances_match_gpytorch():
    """The attributed process has GPyTorch's predictive mean and (diagonal-corrected) variances."""
    model, _ = _sgpr(mean="constant", lik="fixed")
    xs = _points(5, 2, seed=3)
    ig = PosteriorIntegratedGradients(model)
    ig(xs)
    cond = sgpr_module.sgpr_conditioning(model)
    mean, cov = cond.latent(xs)
    with torch.no_grad():
        out = model(xs)
    _rel_close(mean, out.mean, 1e-10, "latent mean")
    _rel_close(cov.diagonal(), out.variance, 1e-10, "latent variance")


# =============================================================================================
# SGPR: integrated gradients
# =============================================================================================
def _ig_by_quadrature(model, xs, baselines, nodes=80):
    t, w = np.polynomial.legendre.leggauss(nodes)
    t = torch.as_tensor((t + 1) / 2, dtype=DTYPE)
    w = torch.as_tensor(w / 2, dtype=DTYPE)
    m, D = xs.shape
    k = baselines.size(0)
    delta = xs.unsqueeze(0) - baselines.unsqueeze(1)  # (k, m, D)
    pts = baselines[:, None, None, :] + t[None, None, :, None] * delta[:, :, None, :]
    with torch.no_grad():
        g = PosteriorGradient(model)(pts.reshape(-1, D))
        gm = g.mean.reshape(k, m, nodes, D)
        gc = g.covariance_matrix.reshape(k, m, nodes, D, k, m, nodes, D)
    coef = w[None, None, :, None] * delta[:, :, None, :] / k
    mean = (coef * gm).sum((0, 2))
    cov = torch.einsum("rptd,rptdsque,sque->pdqe", coef, gc, coef)
    return mean, cov.reshape(m * D, m * D)


@pytest.mark.parametrize("num_baselines", [1, 2])
def test_sgpr_ig_matches_quadrature_and_dense(num_baselines):
    model, _ = _sgpr(mean="linear", lik="fixed")
    xs = _points(3, 2, seed=2)
    baselines = _points(num_baselines, 2, seed=4) * 0.5
    with torch.no_grad():
        attr = PosteriorIntegratedGradients(model, baseline=baselines)(xs)
        cov = attr.covariance_matrix
    q_mean, q_cov = _ig_by_quadrature(model, xs, baselines)
    _rel_close(attr.mean, q_mean, 1e-9, "IG mean vs quadrature")
    _rel_close(cov, q_cov, 1e-9, "IG covariance vs quadrature")
    d_mean, d_cov = _dense_titsias(model, IntegratedGradientFunctional(baselines), xs)
    _rel_close(attr.mean, d_mean, 1e-9, "IG mean vs dense Titsias")
    _rel_close(cov, d_cov, 1e-9, "IG covariance vs dense Titsias")


@pytest.mark.parametrize("kind", ["ard", "matern52"])
def test_sgpr_ig_completeness(kind):
    model, X = _sgpr(mean="constant", lik="gaussian", kind=kind)
    xs = _points(4, 2, seed=6)
    ig = PosteriorIntegratedGradients(model)  # baseline: the training-input mean
    gaps = ig.completeness(xs)
    tol = 1e-9 if kind == "ard" else 1e-6
    scale = gaps.prediction_difference_variance.abs().max()
    assert gaps.mean_gap.abs().max() < tol * gaps.prediction_difference_mean.abs().max()
    assert gaps.variance_gap.abs().max() < tol * scale
    # the attributed difference is GPyTorch's: f(x) − f(b) in mean, and in variance for the smooth process
    b = X.mean(0, keepdim=True)
    for p in range(xs.size(0)):
        mean, cov = _process(model, torch.cat([xs[p : p + 1], b]))
        _rel_close(gaps.prediction_difference_mean[p], mean[0] - mean[1], 1e-10, "f(x) − f(b)")
        var = cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]
        _rel_close(gaps.prediction_difference_variance[p], var, 1e-9, "Var[f(x) − f(b)]")


# =============================================================================================
# SGPR with U = X is the exact GP
# =============================================================================================
def test_sgpr_with_inducing_points_at_data_is_exact():
    n, D = 15, 2
    model, X = _sgpr(n=n, D=D, mean="linear", lik="fixed", inducing=_data(15, 2)[0])
    exact = ExactModel(X, model.train_targets, model.likelihood, model.covar_module.base_kernel, model.mean_module)
    exact = exact.to(DTYPE).eval()
    xs = _points(4, D, seed=7)
    baselines = _points(2, D, seed=8) * 0.3
    with torch.no_grad():
        for make in (PosteriorGradient, lambda mdl: PosteriorIntegratedGradients(mdl, baseline=baselines)):
            a, e = make(model)(xs), make(exact)(xs)
            _rel_close(a.mean, e.mean, 1e-6, "U = X mean")
            _rel_close(a.covariance_matrix, e.covariance_matrix, 1e-6, "U = X covariance")
            _rel_close(a.variance, e.variance, 1e-6, "U = X variance")


# =============================================================================================
# SGPR: batches, float32, caching, chunked training rows
# =============================================================================================
def test_sgpr_batch_model_matches_dense():
    model, _ = _sgpr(mean="constant", lik="gaussian", batch=(2,))
    model.covar_module.base_kernel.base_kernel.lengthscale = torch.tensor([[[0.5, 0.8]], [[0.7, 0.6]]])
    xs = _points(3, 2, seed=9)
    with torch.no_grad():
        grad = PosteriorGradient(model)(xs)
        d_mean, d_cov = _dense_titsias(model, GradientFunctional(), xs)
        fd_mean, _ = _fd_gradient(model, xs.expand(2, 3, 2))
    assert grad.mean.shape == (2, 3, 2)
    _rel_close(grad.mean, d_mean, 1e-9, "batch mean")
    _rel_close(grad.covariance_matrix, d_cov, 1e-9, "batch covariance")
    _rel_close(grad.mean.reshape(2, -1), fd_mean, 1e-6, "batch mean vs FD")


def test_sgpr_float32_close_to_float64():
    model, _ = _sgpr(mean="linear", lik="gaussian")
    model32 = _sgpr(mean="linear", lik="gaussian")[0].float()  # a fresh copy (GPyTorch caches K_UU factors)
    model32.set_train_data(model32.train_inputs[0].float(), model32.train_targets.float(), strict=False)
    xs = _points(3, 2, seed=10)
    with torch.no_grad():
        ref = PosteriorGradient(model)(xs)
        out = PosteriorGradient(model32)(xs.float())
    assert out.mean.dtype == torch.float32
    _rel_close(out.mean.double(), ref.mean, 1e-3, "float32 mean")
    _rel_close(out.variance.double(), ref.variance, 1e-3, "float32 variance")


def test_sgpr_cache_reused_and_invalidated():
    model, _ = _sgpr(mean="zero")
    xs = _points(3, 2, seed=12)
    grad = PosteriorGradient(model)
    first = grad(xs).mean
    cond = sgpr_module.sgpr_conditioning(model)
    assert sgpr_module.sgpr_conditioning(model) is cond  # cached on the prediction strategy
    torch.testing.assert_close(grad(xs).mean, first)
    model.covar_module.base_kernel.outputscale = 2.0
    model.train()
    model.eval()  # GPyTorch drops its prediction strategy: ours goes with it
    assert sgpr_module.sgpr_conditioning(model) is not cond
    with torch.no_grad():
        d_mean, _ = _dense_titsias(model, GradientFunctional(), xs)
    _rel_close(grad(xs).mean, d_mean, 1e-9, "after invalidation")


def test_sgpr_training_rows_in_chunks(monkeypatch):
    model, _ = _sgpr(mean="linear", lik="fixed")
    xs = _points(3, 2, seed=13)
    with torch.no_grad():
        ref = PosteriorGradient(model)(xs)
        model.prediction_strategy = None
        with gpytorch_explain.settings.max_block_elements(4 * 8 * 7):  # 7 training rows (M = 8) per chunk
            assert len(sgpr_module._train_rows(30, 8)) == 5
            out = PosteriorGradient(model)(xs)
    _rel_close(out.mean, ref.mean, 1e-12, "chunked training rows mean")
    _rel_close(out.covariance_matrix, ref.covariance_matrix, 1e-12, "chunked training rows covariance")


def test_sgpr_gradients_flow_without_detached_caches():
    model, _ = _sgpr(mean="zero")
    xs = _points(2, 2, seed=14)
    with gpytorch.settings.detach_test_caches(False):
        out = PosteriorGradient(model)(xs)
        out.variance.sum().backward()
    assert model.covar_module.base_kernel.raw_outputscale.grad is not None
    assert model.covar_module.inducing_points.grad is not None


# =============================================================================================
# SGPR: unsupported combinations
# =============================================================================================
def test_sgpr_unsupported_combinations():
    x, y = _data(12, 2)
    lik = gpytorch.likelihoods.GaussianLikelihood()
    ipk = gpytorch.kernels.InducingPointKernel(_base(2), inducing_points=x[:4].clone(), likelihood=lik)
    nested = ExactModel(x, y, lik, gpytorch.kernels.ScaleKernel(ipk), gpytorch.means.ZeroMean()).to(DTYPE).eval()
    with pytest.raises(NotImplementedError, match="InducingPointKernel"):
        PosteriorGradient(nested)
    with pytest.raises(NotImplementedError, match="InducingPointKernel"):
        DerivedCovariance(ipk, GradientFunctional())

    ipk_ad = gpytorch.kernels.InducingPointKernel(
        _base(1), inducing_points=x[:4, :1].clone(), likelihood=lik, active_dims=(0,)
    )
    active = SGPRModel(x, y, lik, _base(1), x[:4].clone(), gpytorch.means.ZeroMean())
    active.covar_module = ipk_ad
    with pytest.raises(NotImplementedError, match="active_dims"):
        PosteriorIntegratedGradients(active.to(DTYPE).eval(), baseline=torch.zeros(2, dtype=DTYPE))

    gpx_base = gpytorch.kernels.InducingPointKernel(_base(2), inducing_points=x[:4].clone(), likelihood=lik)
    gpx = GPXModel(x, y, base_kernel=gpx_base).eval()
    with pytest.raises(NotImplementedError, match="InducingPointKernel"):
        PosteriorGradient(gpx)

    model, _ = _sgpr()
    model.train()
    with pytest.raises(ModelStateError, match="eval"):
        PosteriorGradient(model)(_points(2, 2))


# =============================================================================================
# exact GPs: chunked (lazy rows) == unchunked
# =============================================================================================
def _exact(kind="ard", mean="linear", n=30, D=3, batch=()):
    x, y = _data(n, D, seed=21, batch=batch)
    lik = gpytorch.likelihoods.GaussianLikelihood(batch_shape=torch.Size(batch))
    lik.noise = 0.04
    model = ExactModel(x, y, lik, _base(D, kind), _mean(mean, D))
    return model.to(DTYPE).eval()


def _outputs(post, rhs):
    op = post.lazy_covariance_matrix
    return {
        "mean": post.mean,
        "variance": post.variance,
        "blocks": op.point_blocks(),
        "dense": op.to_dense(),
        "matmul": op @ rhs,
    }


# max_cholesky_size 0 forces CG on purpose
@pytest.mark.filterwarnings("ignore:PosteriorIntegratedGradients. n = .* is above max_cholesky_size:UserWarning")
@pytest.mark.parametrize(
    "path,kind,functional",
    [
        ("cholesky", "ard", "grad"),
        ("cholesky", "matern52", "ig"),
        ("solve", "ard", "ig"),
        ("root", "ard", "grad"),
        ("cholesky", "ard", "batch"),
    ],
)
def test_exact_chunked_equals_unchunked(monkeypatch, path, kind, functional):
    batch = (2,) if functional == "batch" else ()
    model = _exact(kind, batch=batch)
    D = 3
    xs = _points(5, D, seed=22)
    if functional == "ig":
        # a fixed order: the comparison is about chunking, not the adaptive quadrature
        make = lambda mdl: PosteriorIntegratedGradients(mdl, baseline=_points(2, D, seed=23) * 0.4, order=8)  # noqa: E731
    else:
        make = PosteriorGradient
    rhs = torch.randn(*batch, 5 * D, 2, generator=torch.Generator().manual_seed(24), dtype=DTYPE)
    settings = {
        "cholesky": [],
        # CG with a full-rank pivoted-Cholesky preconditioner: converged to round-off, so chunks cannot differ
        "solve": [
            gpytorch.settings.max_cholesky_size(0),
            gpytorch_explain.settings.max_cholesky_size(0),
            gpytorch.settings.min_preconditioning_size(0),
            gpytorch.settings.max_preconditioner_size(40),
        ],
        "root": [
            gpytorch.settings.max_cholesky_size(0),
            gpytorch_explain.settings.max_cholesky_size(0),
            gpytorch.settings.fast_pred_var(),
        ],
    }[path]
    with torch.no_grad():
        for s in settings:
            s.__enter__()
        try:
            post = make(model)(xs)
            assert not post.lazy_covariance_matrix.lazy_rows
            assert post.lazy_covariance_matrix.factor_type == path
            ref = _outputs(post, rhs)
            # n = 30: 4 points (2 with the batch) per mean chunk, 1 point per operator chunk
            with gpytorch_explain.settings.max_block_elements(4 * D * 30):
                assert len(chunking_module.point_chunks(xs, model.train_inputs[0])) > 1
                post = make(model)(xs)
                assert post.lazy_covariance_matrix.lazy_rows
                assert len(list(post.lazy_covariance_matrix._chunks())) == xs.size(-2)
                out = _outputs(post, rhs)
        finally:
            for s in reversed(settings):
                s.__exit__(None, None, None)
    tol = 1e-9 if path == "solve" else 1e-12
    for key in ref:
        _rel_close(out[key], ref[key], tol, f"chunked {key}")


def test_exact_chunked_keeps_gradients(monkeypatch):
    model = _exact("ard")
    xs = _points(4, 3, seed=25)
    grads = []
    for limit in (gpytorch_explain.settings.max_block_elements.value(), 1):
        model.zero_grad()
        with gpytorch_explain.settings.max_block_elements(limit):
            assert len(chunking_module.point_chunks(xs, model.train_inputs[0])) == (1 if limit > 1 else 4)
            out = PosteriorGradient(model)(xs)
            (out.mean.sum() + out.variance.sum()).backward()
        grads.append(model.covar_module.base_kernel.raw_lengthscale.grad.clone())
    _rel_close(grads[1], grads[0], 1e-10, "hyperparameter gradients, chunked")


class _SVGP(gpytorch.models.ApproximateGP):
    def __init__(self, Z, kernel, num_tasks=None):
        batch = torch.Size([num_tasks]) if num_tasks else torch.Size()
        dist = gpytorch.variational.CholeskyVariationalDistribution(Z.size(-2), batch_shape=batch)
        strategy = gpytorch.variational.VariationalStrategy(self, Z, dist)
        if num_tasks:
            strategy = gpytorch.variational.IndependentMultitaskVariationalStrategy(strategy, num_tasks=num_tasks)
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _svgp(num_tasks=None):
    batch = (num_tasks,) if num_tasks else ()
    Z = _points(6, 2, seed=30)
    model = _SVGP(Z, _base(2, "ard", batch), num_tasks).to(DTYPE)
    gen = torch.Generator().manual_seed(31)
    dist = getattr(model.variational_strategy, "base_variational_strategy", model.variational_strategy)
    dist = dist._variational_distribution
    with torch.no_grad():
        dist.variational_mean.copy_(torch.randn(*batch, 6, generator=gen, dtype=DTYPE))
        dist.chol_variational_covar.copy_(0.3 * torch.eye(6, dtype=DTYPE) + 0.05 * torch.randn(*batch, 6, 6).tril())
    return model.eval()


@pytest.mark.parametrize("which", ["sgpr", "sgpr_batch", "svgp", "svgp_multitask"])
def test_inducing_models_chunked_equals_unchunked(monkeypatch, which):
    """Many test points: variational / SGPR attribution GPs form the m x D x M rows chunk by chunk."""
    if which.startswith("sgpr"):
        model, _ = _sgpr(mean="linear", batch=(2,) if which == "sgpr_batch" else ())
    else:
        model = _svgp(num_tasks=3 if which == "svgp_multitask" else None)
    xs = _points(5, 2, seed=32)
    rhs = torch.randn(5 * 2, 2, generator=torch.Generator().manual_seed(33), dtype=DTYPE)
    with torch.no_grad():
        ig = lambda mdl: PosteriorIntegratedGradients(mdl, baseline=torch.zeros(2, dtype=DTYPE))  # noqa: E731
        for make in (PosteriorGradient, ig):
            post = make(model)(xs)
            assert not post.lazy_covariance_matrix.lazy_rows
            ref = _outputs(post, rhs)
            # D = 2, M = 6 or 8: at most 3 points per mean chunk, 1 point per operator chunk
            with gpytorch_explain.settings.max_block_elements(4 * 2 * 6):
                post = make(model)(xs)
                assert post.lazy_covariance_matrix.lazy_rows
                assert len(list(post.lazy_covariance_matrix._chunks())) == xs.size(-2)
                out = _outputs(post, rhs)
            for key in ref:
                assert out[key].shape == ref[key].shape, key
                _rel_close(out[key], ref[key], 1e-12, f"chunked {key}")
