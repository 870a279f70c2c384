#!/usr/bin/env python3
"""Attribution GPs of batch models equal those of each member alone, and kernels that compute a known kernel's
function (subclasses, a user kernel on GPyTorch's squared distance, GPX's smooth part) get its joint covariance.

References: per-member unbatched models (whose attributions are checked against brute force elsewhere), the plain
``RBFKernel`` closed forms, and the model's own ``.variance`` (the per-point blocks).
"""

from __future__ import annotations

import gpytorch
import pytest
import torch

from gpytorch_explain import GPXModel, PosteriorGradient, PosteriorIntegratedGradients
from tests.helpers import assert_rel_close

DTYPE = torch.float64
B, N, D = 3, 14, 3


class _GP(gpytorch.models.ExactGP):
    def __init__(self, x, y, kernel, mean):
        batch = y.shape[:-1]
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood(batch_shape=batch))
        self.mean_module = mean
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


class _MyLinearMean(gpytorch.means.LinearMean):
    """Not the exact type: its gradient comes from autograd."""


def _data():
    gen = torch.Generator().manual_seed(5)
    x = torch.rand(B, N, D, generator=gen, dtype=DTYPE) * 2 - 1
    y = torch.sin(2 * x[..., 0]) + 0.5 * x[..., 1] - x[..., 2] ** 2
    pts = torch.rand(4, D, generator=gen, dtype=DTYPE) * 2 - 1
    return x, y, pts


def _kernel(name, batch):
    k = gpytorch.kernels
    if name == "linear":
        kern = k.LinearKernel(batch_shape=batch)
        kern.variance = torch.tensor([0.5, 1.0, 2.0], dtype=DTYPE)[: max(1, batch.numel())].reshape(*batch, 1, 1)
        return kern
    rbf = k.ScaleKernel(k.RBFKernel(active_dims=torch.tensor([0, 1]), batch_shape=batch), batch_shape=batch)
    rbf.base_kernel.lengthscale = 0.8
    lin = k.LinearKernel(active_dims=torch.tensor([2]), batch_shape=batch)
    lin.variance = torch.tensor([0.5, 1.0, 2.0], dtype=DTYPE)[: max(1, batch.numel())].reshape(*batch, 1, 1)
    return rbf + lin


def _mean(name, batch):
    weights = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7], [-0.4, 0.9, 1.1]], dtype=DTYPE)
    cls = gpytorch.means.LinearMean if name == "linear" else _MyLinearMean
    mean = cls(D, batch_shape=batch)
    mean.weights.data = (weights if len(batch) else weights[:1]).reshape(*batch, D, 1).clone()
    mean.bias.data.fill_(0.2)
    return mean


def _member(x, y, kernel_name, mean_name, b):
    model = _GP(x[b], y[b], _kernel(kernel_name, torch.Size()), _mean(mean_name, torch.Size())).to(DTYPE)
    with torch.no_grad():  # member b's hyperparameters
        batch = _GP(x, y, _kernel(kernel_name, torch.Size([B])), _mean(mean_name, torch.Size([B]))).to(DTYPE)
        for p, q in zip(model.parameters(), batch.parameters(), strict=True):
            p.copy_(q[b].reshape(p.shape))
    model.likelihood.noise = 0.05
    return model.eval()


@pytest.mark.parametrize("kernel_name", ["linear", "rbf+linear"])
@pytest.mark.parametrize("mean_name", ["linear", "generic"])
def test_batch_members_equal_unbatched_models(kernel_name, mean_name):
    # a batched LinearKernel's IG rows and a batched mean's gradient / IG mixed the baseline axis with the batch axis
    # (every member got the batch average) or summed the members' mean gradients
    x, y, pts = _data()
    model = _GP(x, y, _kernel(kernel_name, torch.Size([B])), _mean(mean_name, torch.Size([B]))).to(DTYPE)
    model.likelihood.noise = 0.05
    model.eval()
    baseline = torch.tensor([0.1, -0.2, 0.3], dtype=DTYPE)
    grad = PosteriorGradient(model)(pts)
    ig = PosteriorIntegratedGradients(model, baseline=baseline)(pts)
    for b in range(B):
        single = _member(x, y, kernel_name, mean_name, b)
        g = PosteriorGradient(single)(pts)
        i = PosteriorIntegratedGradients(single, baseline=baseline)(pts)
        assert_rel_close(grad.mean[b], g.mean, 1e-10, f"gradient mean of member {b}")
        assert_rel_close(ig.mean[b], i.mean, 1e-10, f"IG mean of member {b}")
        assert_rel_close(ig.covariance_matrix[b], i.covariance_matrix, 1e-8, f"IG covariance of member {b}")
        with torch.no_grad():
            gap = single(pts).mean - single(baseline.unsqueeze(0)).mean
        assert_rel_close(ig.mean[b].sum(-1), gap, 1e-8, f"IG completeness of member {b}")


class _MyRBF(gpytorch.kernels.RBFKernel):
    """Inherits forward: the RBF closed forms apply."""


class _UserSE(gpytorch.kernels.Kernel):
    """GPyTorch's recommended pattern for a new kernel: its squared distance is clamped at 0."""

    has_lengthscale = True

    def forward(self, x1, x2, diag=False, **params):
        return torch.exp(
            -0.5 * self.covar_dist(x1.div(self.lengthscale), x2.div(self.lengthscale), square_dist=True, diag=diag)
        )


def test_subclassed_and_user_kernels_get_the_rbf_joint_covariance():
    # the autograd leaf differentiated the clamped squared distance at coincident points and randomly dropped
    # ∂_i∂'_i k: joint covariances with diagonals below .variance, some negative
    gen = torch.Generator().manual_seed(7)
    X = torch.randn(30, D, generator=gen, dtype=DTYPE) * 2 + 3
    y = torch.sin(X).sum(-1)
    pts = torch.randn(12, D, generator=gen, dtype=DTYPE) * 2 + 3
    covs = {}
    for name, base in (("rbf", gpytorch.kernels.RBFKernel()), ("sub", _MyRBF()), ("user", _UserSE())):
        model = _GP(X, y, gpytorch.kernels.ScaleKernel(base), gpytorch.means.ConstantMean()).to(DTYPE)
        base.lengthscale = 1.3
        model.likelihood.noise = 0.05
        dist = PosteriorGradient(model.eval())(pts)
        covs[name] = dist.covariance_matrix
        assert_rel_close(dist.covariance_matrix.diagonal(), dist.variance.reshape(-1), 1e-9, f"{name} diagonal")
    assert_rel_close(covs["sub"], covs["rbf"], 1e-12, "RBFKernel subclass")
    assert_rel_close(covs["user"], covs["rbf"], 1e-9, "user kernel on covar_dist")


def test_gpx_gradient_joint_covariance_diagonal_is_the_variance():
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(20, D, generator=gen, dtype=DTYPE)
    model = GPXModel(x, x[:, 0] * torch.sin(x[:, 1]) + 0.3 * x[:, 2]).fit(max_iter=20)
    pts = torch.randn(12, D, generator=gen, dtype=DTYPE)
    dist = PosteriorGradient(model)(pts)
    cov = dist.covariance_matrix
    assert_rel_close(cov.diagonal(), dist.variance.reshape(-1), 1e-9, "GPX gradient diagonal")
    assert torch.linalg.eigvalsh(cov).min() > -1e-9 * cov.diagonal().max()


def test_kernel_roles():
    from gpytorch_explain.attribution._roles import kernel_role

    class Doubled(gpytorch.kernels.RBFKernel):  # another function through the inherited forward
        def covar_dist(self, *args, **kwargs):
            return 2 * super().covar_dist(*args, **kwargs)

    class Again(_MyRBF):
        pass

    assert kernel_role(_MyRBF()) is gpytorch.kernels.RBFKernel and kernel_role(Again()) is gpytorch.kernels.RBFKernel
    assert kernel_role(Doubled()) is None and kernel_role(_UserSE()) is None
    assert kernel_role(gpytorch.kernels.ScaleKernel(_MyRBF())) is gpytorch.kernels.ScaleKernel


def test_declared_roles_need_the_declared_class_and_no_override_below():
    from gpytorch_explain.attribution._roles import kernel_role

    class WrittenOut(gpytorch.kernels.Kernel):  # declares RBFKernel without being one: no closed forms
        has_lengthscale = True
        _explain_role = gpytorch.kernels.RBFKernel

        def forward(self, x1, x2, diag=False, **params):
            return torch.exp(-0.5 * self.covar_dist(x1 / self.lengthscale, x2 / self.lengthscale, square_dist=True))

    class Declared(gpytorch.kernels.ProductKernel):
        _explain_role = gpytorch.kernels.ProductKernel

        def forward(self, x1, x2, diag=False, **params):
            return super().forward(x1, x2, diag=diag, **params)

    class Cubed(Declared):  # redefines the value below the declaration
        def forward(self, x1, x2, diag=False, **params):
            return super().forward(x1, x2, diag=diag, **params) ** 3

    parts = (gpytorch.kernels.RBFKernel(), gpytorch.kernels.LinearKernel())
    assert kernel_role(WrittenOut()) is None
    assert kernel_role(Declared(*parts)) is gpytorch.kernels.ProductKernel
    assert kernel_role(Cubed(*parts)) is None


def test_non_stationary_user_kernel_that_vanishes_at_a_point():
    # k = x0 x0' exp(-|x - x'|^2 / 2 l^2) on covar_dist: zero at x0 = 0, where a step read off the first point only
    # came out as the box size (several lengthscales) and gave negative variances
    class Scaled(gpytorch.kernels.Kernel):
        has_lengthscale = True

        def forward(self, x1, x2, diag=False, **params):
            se = torch.exp(-0.5 * self.covar_dist(x1 / self.lengthscale, x2 / self.lengthscale, square_dist=True))
            return x1[..., :, :1] * x2[..., :, :1].mT * se

    gen = torch.Generator().manual_seed(4)
    X = torch.randn(20, 2, generator=gen, dtype=DTYPE)
    y = X[:, 0] * torch.sin(X[:, 1])
    kern = Scaled()
    kern.lengthscale = 0.3
    model = _GP(X, y, kern, gpytorch.means.ZeroMean()).to(DTYPE)
    model.likelihood.noise = 0.05
    pts = torch.randn(4, 2, generator=gen, dtype=DTYPE)
    pts[0, 0] = 0.0
    dist = PosteriorGradient(model.eval())(pts)
    assert (dist.variance >= -1e-12).all()
    assert_rel_close(dist.covariance_matrix.diagonal(), dist.variance.reshape(-1), 1e-9, "diagonal")
