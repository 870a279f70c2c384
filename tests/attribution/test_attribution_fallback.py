"""The autograd fallback: attribution GPs of models whose forward transforms the inputs (deep kernel learning,
user compositions, multitask kernels), against independent references in float64:

* gradient means against autograd of the model's own posterior mean;
* gradient covariances against central finite differences of the model's joint posterior covariance
  (values only: :math:`[\\Sigma(x+he_i, x'+he_j) - \\Sigma(x+he_i, x'-he_j) - \\Sigma(x-he_i, x'+he_j)
  + \\Sigma(x-he_i, x'-he_j)] / 4h^2`);
* IG means against adaptive scipy quadrature of the autograd gradient mean along the path, IG variances
  against completeness with the model's joint posterior of f(x) - f(b);
* on a plain GPR, the fallback equals the closed forms.
"""

from __future__ import annotations

import warnings

import gpytorch
import numpy as np
import pytest
import torch
from scipy import integrate

from gpytorch_explain import PosteriorGradient, PosteriorIntegratedGradients
from gpytorch_explain.attribution.adaptive import AutogradFallbackWarning
from gpytorch_explain.errors import KernelNotDifferentiableError
from tests.helpers import assert_close_to_scale as _close

DTYPE = torch.float64


def _data(n=30, D=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, D, generator=g, dtype=DTYPE) * 2 - 1
    y = torch.sin(2.5 * X[:, 0]) + X[:, -1] ** 2 + 0.05 * torch.randn(n, generator=g, dtype=DTYPE)
    return X, y


class DKL(gpytorch.models.ExactGP):
    def __init__(self, X, y, base):
        super().__init__(X, y, gpytorch.likelihoods.GaussianLikelihood())
        torch.manual_seed(1)
        D = X.size(-1)
        self.net = torch.nn.Sequential(torch.nn.Linear(D, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(base)

    def forward(self, x):
        z = self.net(x)
        return gpytorch.distributions.MultivariateNormal(self.mean_module(z), self.covar_module(z))


class GPR(gpytorch.models.ExactGP):
    def __init__(self, X, y, kernel):
        super().__init__(X, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _dkl(base):
    X, y = _data()
    model = DKL(X, y, base).to(DTYPE)
    model.likelihood.noise = 0.01
    model.mean_module.constant.data.fill_(0.3)
    model.covar_module.outputscale = 1.5
    model.covar_module.base_kernel.lengthscale = 0.7
    return model.eval(), X


def _latent(model, Z):
    with torch.no_grad():
        dist = model(Z)
    return dist.mean, dist.covariance_matrix


def fd_gradient_covariance(joint, x, h=1e-3):
    """(m*D, m*D) interleaved Cov of the gradient by central differences of the joint posterior covariance,
    Richardson-extrapolated from steps 2h and h (error O(h^4) + round-off eps/h^2, about 1e-10 here)."""
    return (4 * _central(joint, x, h) - _central(joint, x, 2 * h)) / 3


def _central(joint, x, h):
    m, D = x.shape
    eye = torch.eye(D, dtype=x.dtype) * h
    plus = (x[:, None, :] + eye).reshape(-1, D)
    minus = (x[:, None, :] - eye).reshape(-1, D)
    C = joint(torch.cat([plus, minus]))
    k = m * D
    return (C[:k, :k] - C[:k, k:] - C[k:, :k] + C[k:, k:]) / (4 * h * h)


def autograd_gradient_mean(mean_fn, x):
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(mean_fn(xg).sum(), xg)
    return g


@pytest.mark.parametrize("base", ["rbf", "matern52"])
def test_dkl_gradient_against_autograd_and_finite_differences(base):
    kernel = gpytorch.kernels.RBFKernel() if base == "rbf" else gpytorch.kernels.MaternKernel(nu=2.5)
    model, X = _dkl(kernel)
    x = torch.cat([X[:1], torch.tensor([[0.2, -0.4], [0.21, -0.38]], dtype=DTYPE)])  # a training point, a near pair
    with pytest.warns(AutogradFallbackWarning, match="feature extractor"):
        pg = PosteriorGradient(model)
    assert pg.method == "autograd"
    post = pg(x)
    assert post.method == "autograd"
    ref_mean = autograd_gradient_mean(lambda z: model(z).mean, x)
    _close(post.mean, ref_mean, 1e-10, "gradient mean")
    ref_cov = fd_gradient_covariance(lambda z: _latent(model, z)[1], x)
    _close(post.covariance_matrix, ref_cov, 1e-6, "gradient covariance")
    # the closed forms (which ignore the network) would be far off: the fallback is not a no-op
    with pytest.raises(NotImplementedError, match="feature extractor"):
        PosteriorGradient(model, method="closed_form")


def test_dkl_integrated_gradients_against_quadrature_and_completeness():
    model, X = _dkl(gpytorch.kernels.RBFKernel())
    x = torch.tensor([[0.5, -0.3]], dtype=DTYPE)
    b = torch.tensor([0.1, 0.05], dtype=DTYPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutogradFallbackWarning)
        ig = PosteriorIntegratedGradients(model, baseline=b)
    attr = ig(x)
    assert attr.method == "autograd" and attr.quadrature_order >= 64

    def grad_mean(point):
        return autograd_gradient_mean(lambda z: model(z).mean, point.unsqueeze(0))[0]

    ref = torch.zeros_like(x)
    for p in range(x.size(0)):
        delta = x[p] - b
        for i in range(x.size(1)):
            val, _ = integrate.quad(
                lambda t, d=delta, i=i: grad_mean(b + t * d)[i].item(), 0.0, 1.0, epsabs=1e-12, epsrel=1e-10
            )
            ref[p, i] = delta[i] * val
    _close(attr.mean, ref, 1e-8, "IG mean")
    gaps = ig.completeness(x)
    scale = gaps.prediction_difference_variance.abs().max()
    assert gaps.mean_gap.abs().max() < 1e-8 * gaps.prediction_difference_mean.abs().max()
    assert gaps.variance_gap.abs().max() < 1e-6 * scale


@pytest.mark.parametrize("functional", ["grad", "ig"])
def test_fallback_equals_closed_forms_on_plain_gpr(functional):
    X, y = _data(D=3, seed=3)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=3))
    model = GPR(X, y, kernel).to(DTYPE)
    model.likelihood.noise = 0.02
    kernel.base_kernel.lengthscale = torch.tensor([0.5, 0.8, 1.1])
    model.eval()
    x = torch.cat([X[:1], torch.rand(2, 3, dtype=DTYPE, generator=torch.Generator().manual_seed(4))])
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutogradFallbackWarning)  # a plain GPR is verified: no fallback
        make = PosteriorGradient if functional == "grad" else PosteriorIntegratedGradients
        closed = make(model)
    assert closed.method == "closed_form"
    auto = make(model, method="autograd") if functional == "grad" else make(model, order=48, method="autograd")
    a, c = auto(x), closed(x)
    _close(a.mean, c.mean, 1e-8, "mean")
    _close(a.covariance_matrix, c.covariance_matrix, 1e-8, "covariance")


def test_disconnected_kernel_raises_instead_of_zeros():
    class NumpyRBF(gpytorch.kernels.Kernel):
        has_lengthscale = False

        def forward(self, x1, x2, diag=False, **params):
            a, b = x1.detach().numpy(), x2.detach().numpy()
            d2 = ((a[..., :, None, :] - b[..., None, :, :]) ** 2).sum(-1)
            out = torch.tensor(np.exp(-0.5 * d2 / 0.3**2), dtype=x1.dtype)
            return out.diagonal(dim1=-2, dim2=-1) if diag else out

    X, y = _data()
    model = GPR(X, y, gpytorch.kernels.ScaleKernel(NumpyRBF())).to(DTYPE).eval()
    x = X[:2] + 0.1
    with pytest.raises(KernelNotDifferentiableError, match="(?i)disconnected"):
        PosteriorIntegratedGradients(model, order=16)(x)
    with pytest.raises(KernelNotDifferentiableError, match="(?i)disconnected"):
        PosteriorGradient(model)(x)
    with pytest.raises(KernelNotDifferentiableError, match="(?i)disconnected"):
        PosteriorGradient(model, method="autograd")(x)


class _Laplace(gpytorch.kernels.Kernel):
    """exp(-||x - x'||_1 / 0.5): autograd-differentiable away from x = x', but its GP has no gradient."""

    def forward(self, x1, x2, diag=False, **params):
        K = torch.exp(-(x1[..., :, None, :] - x2[..., None, :, :]).abs().sum(-1) / 0.5)
        return K.diagonal(dim1=-2, dim2=-1) if diag else K


class _UserRBF(gpytorch.kernels.Kernel):
    def __init__(self, ell):
        super().__init__()
        self.ell = ell

    def forward(self, x1, x2, diag=False, **params):
        K = torch.exp(-0.5 * ((x1[..., :, None, :] - x2[..., None, :, :]) ** 2).sum(-1) / self.ell**2)
        return K.diagonal(dim1=-2, dim2=-1) if diag else K


class _Warped(GPR):
    def forward(self, x):
        return super().forward(torch.tanh(x))


def test_a_kernel_without_a_gradient_process_raises_instead_of_zero_variances():
    """The Laplace kernel through the autograd leaf, the posterior-level fallback and a transforming forward: each
    raised nothing and returned gradient variances of exactly 0 (negative values clamped), where the true ones are
    infinite (the finite-difference variance of the posterior grows like 1/step)."""
    X, y = _data(D=3)
    x = X[:2] + 0.05
    for model_cls, kwargs in ((GPR, {}), (GPR, dict(method="autograd")), (_Warped, {})):
        model = model_cls(X, y, _Laplace()).to(DTYPE)
        model.likelihood.noise = 0.01
        model.eval()
        gradient = PosteriorGradient(model, **kwargs)
        for _ in range(2):  # and again: the verdict is kept, not only raised once
            with pytest.raises(KernelNotDifferentiableError, match="grows like 1/step"):
                _ = gradient(x).variance  # the covariance is lazy: it raises where it is formed
            with pytest.raises(KernelNotDifferentiableError, match="grows like 1/step"):
                _ = PosteriorIntegratedGradients(model, order=8, **kwargs)(x).variance
    # the probe itself: 1/step growth raises, a smooth covariance at any lengthscale below or above the steps does not
    from gpytorch_explain.attribution._differentiability import check_mean_square_differentiable

    def laplace(R):
        return torch.exp(-(R[:, None, :] - R[None, :, :]).abs().sum(-1))

    with pytest.raises(KernelNotDifferentiableError):
        check_mean_square_differentiable(laplace, torch.zeros(2, dtype=DTYPE), torch.ones(2, dtype=DTYPE), "k")
    for ell in (1e-7, 1e-4, 1e-2, 0.3, 30.0):
        kern = _UserRBF(ell)
        check_mean_square_differentiable(
            lambda R, kern=kern: kern(R, R).to_dense(), torch.zeros(2, dtype=DTYPE), torch.ones(2, dtype=DTYPE), "k"
        )
        model = GPR(X, y, _UserRBF(ell)).to(DTYPE)
        model.likelihood.noise = 0.01
        g = PosteriorGradient(model.eval())(x)
        assert torch.isfinite(g.variance).all() and (g.variance > 0).all()


class MultitaskGP(gpytorch.models.ExactGP):
    def __init__(self, X, Y):
        super().__init__(X, Y, gpytorch.likelihoods.MultitaskGaussianLikelihood(num_tasks=2))
        self.mean_module = gpytorch.means.MultitaskMean(gpytorch.means.ConstantMean(), num_tasks=2)
        self.covar_module = gpytorch.kernels.MultitaskKernel(gpytorch.kernels.RBFKernel(), num_tasks=2, rank=1)

    def forward(self, x):
        return gpytorch.distributions.MultitaskMultivariateNormal(self.mean_module(x), self.covar_module(x))


def test_multitask_kernel_per_output_attributions():
    X, y = _data(n=20)
    Y = torch.stack([y, torch.cos(2 * X[:, 1])], -1)
    model = MultitaskGP(X, Y).to(DTYPE)
    model.covar_module.data_covar_module.lengthscale = 0.6
    model.likelihood.noise = 0.01
    model.eval()
    x = torch.tensor([[0.3, -0.2], [-0.5, 0.4]], dtype=DTYPE)
    with pytest.warns(AutogradFallbackWarning, match="multi-task kernel"):
        pg = PosteriorGradient(model)
    post = pg(x)
    assert post.mean.shape == (2, 2, 2)  # (tasks, points, features)
    for t in range(2):
        ref = autograd_gradient_mean(lambda z, t=t: model(z).mean[..., t], x)
        _close(post.mean[t], ref, 1e-10, f"task {t} gradient mean")

        def joint(z, t=t):
            with torch.no_grad():
                C = model(z).covariance_matrix  # interleaved (point, task)
            return C[t::2, t::2]

        _close(post.covariance_matrix[t], fd_gradient_covariance(joint, x), 1e-6, f"task {t} covariance")


def test_batch_independent_outputs_closed_forms_per_output():
    X, y = _data(n=20)
    Y = torch.stack([y, torch.cos(2 * X[:, 1])])

    class BatchGP(gpytorch.models.ExactGP):
        def __init__(self):
            super().__init__(X, Y, gpytorch.likelihoods.GaussianLikelihood(batch_shape=torch.Size([2])))
            self.mean_module = gpytorch.means.ConstantMean(batch_shape=torch.Size([2]))
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(batch_shape=torch.Size([2])), batch_shape=torch.Size([2])
            )

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = BatchGP().to(DTYPE)
    model.covar_module.base_kernel.lengthscale = torch.tensor([[[0.5]], [[0.9]]])
    model.likelihood.noise = 0.01
    model.eval()
    x = torch.tensor([[0.3, -0.2], [-0.5, 0.4]], dtype=DTYPE)
    pg = PosteriorGradient(model)
    assert pg.method == "closed_form"
    post = pg(x)
    assert post.mean.shape == (2, 2, 2)
    for t in range(2):
        ref = autograd_gradient_mean(lambda z, t=t: model(z).mean[t], x)
        _close(post.mean[t], ref, 1e-10, f"output {t} gradient mean")
        _close(
            post.covariance_matrix[t],
            fd_gradient_covariance(lambda z, t=t: _latent(model, z)[1][t], x),
            1e-6,
            f"output {t} covariance",
        )


class _SVGPCustomNames(gpytorch.models.ApproximateGP):
    """An SVGP whose prior modules are not called ``mean_module`` / ``covar_module``: the closed forms cannot see
    its kernel, the autograd fallback must still work (it needs only the inducing points and the posterior)."""

    def __init__(self, Z):
        dist = gpytorch.variational.CholeskyVariationalDistribution(Z.size(0))
        strategy = gpytorch.variational.VariationalStrategy(self, Z, dist, learn_inducing_locations=False)
        super().__init__(strategy)
        self.prior_mean = gpytorch.means.ConstantMean()
        self.prior_kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.prior_mean(x), self.prior_kernel(x))


class _SVGPStandardNames(_SVGPCustomNames):
    def __init__(self, Z):
        super().__init__(Z)
        self.mean_module, self.covar_module = self.prior_mean, self.prior_kernel


def test_svgp_without_covar_module_uses_fallback_with_default_baseline():
    g = torch.Generator().manual_seed(3)
    Z = torch.rand(9, 2, generator=g, dtype=DTYPE) * 2 - 1
    custom = _SVGPCustomNames(Z).to(DTYPE)
    custom.prior_kernel.base_kernel.lengthscale = 0.6
    custom.prior_mean.constant.data.fill_(0.2)
    with torch.no_grad():
        custom.variational_strategy._variational_distribution.variational_mean.copy_(
            torch.randn(9, generator=g, dtype=DTYPE)
        )
        custom.variational_strategy.variational_params_initialized.fill_(1)  # keep this mean (no re-initialisation)
    standard = _SVGPStandardNames(Z).to(DTYPE)
    standard.load_state_dict(custom.state_dict(), strict=False)
    custom.eval(), standard.eval()
    x = torch.rand(3, 2, generator=g, dtype=DTYPE) * 2 - 1
    with pytest.warns(AutogradFallbackWarning, match="covar_module"):
        auto = PosteriorIntegratedGradients(custom)  # default baseline: the mean of the inducing points
    assert auto.method == "autograd"
    closed = PosteriorIntegratedGradients(standard, method="closed_form")
    a, c = auto(x), closed(x)
    _close(a.mean, c.mean, 1e-8, "IG mean")
    _close(a.covariance_matrix, c.covariance_matrix, 1e-7, "IG covariance")
