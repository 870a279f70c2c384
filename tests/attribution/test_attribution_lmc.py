"""Attribution GPs of variational LMC models (``LMCVariationalStrategy``) against brute force (float64).

f_t = Σ_q a_qt g_q. References use only the model's own predictive ``model(x)`` (a MultitaskMultivariateNormal
over points x tasks): autograd of its mean for the gradient mean, Gauss-Legendre quadrature of that gradient for the
IG mean, and for covariances mixed central finite differences (in x and x', h = 1e-4) of its cross-covariance
block between two copies of the points (the diagonal jitter never enters a cross block).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gpytorch.distributions import MultivariateNormal
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import BernoulliLikelihood
from gpytorch.means import ConstantMean
from gpytorch.models import ApproximateGP
from gpytorch.variational import (
    CholeskyVariationalDistribution,
    LMCVariationalStrategy,
    UnwhitenedVariationalStrategy,
    VariationalStrategy,
)

from gpytorch_explain.attribution import (
    GradientFunctional,
    IntegratedGradientFunctional,
    PosteriorGradient,
    PosteriorIntegratedGradients,
)
from gpytorch_explain.attribution.classification import expected_probability_gradient, latent_gradient_moments
from gpytorch_explain.attribution.lmc import LMCConditioning, lmc_joint_functional_posterior
from gpytorch_explain.attribution.variational import variational_conditioning, variational_functional_posterior

DTYPE = torch.float64
D, Q, T, U, M = 2, 2, 3, 6, 3


class LMCModel(ApproximateGP):
    def __init__(self, strategy_cls=VariationalStrategy, kernel="rbf", seed=0):
        gen = torch.Generator().manual_seed(seed)
        Z = torch.rand(Q, U, D, generator=gen, dtype=DTYPE) * 2 - 1
        dist = CholeskyVariationalDistribution(U, batch_shape=torch.Size([Q]))
        base = strategy_cls(self, Z, dist, learn_inducing_locations=False)
        super().__init__(LMCVariationalStrategy(base, num_tasks=T, num_latents=Q))
        self.mean_module = ConstantMean(batch_shape=torch.Size([Q]))
        inner = (
            RBFKernel(batch_shape=torch.Size([Q]), ard_num_dims=D)
            if kernel == "rbf"
            else MaternKernel(nu=2.5, batch_shape=torch.Size([Q]), ard_num_dims=D)
        )
        self.covar_module = ScaleKernel(inner, batch_shape=torch.Size([Q]))
        self.to(DTYPE)
        with torch.no_grad():
            inner.lengthscale = torch.rand(Q, 1, D, generator=gen, dtype=DTYPE) + 0.5
            self.covar_module.outputscale = torch.tensor([1.3, 0.7], dtype=DTYPE)
            self.mean_module.constant.copy_(torch.tensor([0.4, -0.2], dtype=DTYPE))
            self.variational_strategy.lmc_coefficients.copy_(torch.randn(Q, T, generator=gen, dtype=DTYPE))
            dist.variational_mean.copy_(torch.randn(Q, U, generator=gen, dtype=DTYPE))
            chol = torch.tril(0.3 * torch.randn(Q, U, U, generator=gen, dtype=DTYPE)) + 0.5 * torch.eye(U, dtype=DTYPE)
            dist.chol_variational_covar.copy_(chol)
        base.variational_params_initialized.fill_(1)

    def forward(self, x):
        return MultivariateNormal(self.mean_module(x), self.covar_module(x))


@pytest.fixture(scope="module", params=[(VariationalStrategy, "rbf"), (UnwhitenedVariationalStrategy, "matern")])
def model(request):
    strategy_cls, kernel = request.param
    return LMCModel(strategy_cls, kernel).eval()


def _points(seed=1, m=M):
    return torch.rand(m, D, generator=torch.Generator().manual_seed(seed), dtype=DTYPE) * 2 - 1


def _rel(actual, expected, tol, what):
    err = ((actual - expected).abs().max() / expected.abs().max()).item()
    assert err < tol, f"{what}: relative error {err:.2e} >= {tol:.0e}"


def _model_gradients(model, x):
    """(T, m, D): autograd of the model's own predictive mean of each task."""
    x = x.clone().requires_grad_(True)
    mean = model(x).mean  # (m, T)
    return torch.stack([torch.autograd.grad(mean[:, t].sum(), x, retain_graph=True)[0] for t in range(T)])


def _model_gradient_covariance(model, x, h=1e-4):
    """Cov(∂f_t(x_p)/∂x_i, ∂f_s(x_q)/∂x_j) as (T, mD, T, mD), by the mixed central difference
    [C(+,+) - C(+,-) - C(-,+) + C(-,-)] / 4h² of the model's own cross-covariances C(x_p ± h e_i, x_q ± h e_j),
    all read off one joint predictive of two separate copies of the perturbed points (no jitter in cross blocks)."""
    m = x.size(0)
    steps = h * torch.eye(D, dtype=DTYPE)
    pts = torch.stack([x[:, None, :] + steps, x[:, None, :] - steps], dim=2).reshape(-1, D)  # (p, i, sign)
    n = pts.size(0)
    with torch.no_grad():
        cov = model(torch.cat([pts, pts])).covariance_matrix.reshape(2 * n, T, 2 * n, T)[:n, :, n:, :]
    cov = cov.reshape(m, D, 2, T, m, D, 2, T)
    mixed = cov[:, :, 0, :, :, :, 0] - cov[:, :, 0, :, :, :, 1] - cov[:, :, 1, :, :, :, 0] + cov[:, :, 1, :, :, :, 1]
    return (mixed / (4 * h * h)).permute(2, 0, 1, 5, 3, 4).reshape(T, m * D, T, m * D)


def test_conditioning_is_lmc_and_latent_matches_model(model):
    cond = variational_conditioning(model)
    assert isinstance(cond, LMCConditioning) and cond.num_tasks == T
    x = _points()
    mean, cov = cond.latent(x)
    out = model(x)
    torch.testing.assert_close(mean, out.mean.detach().mT, rtol=1e-10, atol=1e-12)
    full = out.covariance_matrix.detach().reshape(M, T, M, T)
    per_task = torch.stack([full[:, t, :, t] for t in range(T)])
    # the model adds jitter on the diagonal (base strategy and LMC): compare off-diagonal, diagonal to 1e-5
    off = ~torch.eye(M, dtype=torch.bool)
    torch.testing.assert_close(cov[:, off], per_task[:, off], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(cov.diagonal(dim1=-2, dim2=-1), per_task.diagonal(dim1=-2, dim2=-1), rtol=0, atol=1e-5)


def test_gradient_mean_and_covariance_per_task_and_across_tasks(model):
    x = _points()
    post = variational_functional_posterior(model, GradientFunctional(), x)
    assert post.mean.shape == (T, M, D) and post.lazy_covariance_matrix.shape == (T, M * D, M * D)
    _rel(post.mean, _model_gradients(model, x), 1e-10, "gradient mean")
    dense = post.covariance_matrix
    joint = lmc_joint_functional_posterior(model, GradientFunctional(), x)
    assert joint.mean.shape == (T * M * D,)
    torch.testing.assert_close(joint.mean.reshape(T, M, D), post.mean, rtol=1e-12, atol=1e-14)
    J = joint.covariance_matrix.reshape(T, M * D, T, M * D)
    ref = _model_gradient_covariance(model, x)
    _rel(J, ref, 1e-6, "joint Cov(grad f_t, grad f_s)")
    for t in range(T):
        _rel(dense[t], ref[t, :, t], 1e-6, f"per-task covariance {t}")
    assert (J[0, :, 2] - J[0, :, 0]).abs().max() > 1e-2  # the cross-task blocks are not trivial


def test_lazy_operator_agrees_with_its_dense_form(model):
    x = _points(seed=3, m=4)
    post = variational_functional_posterior(model, GradientFunctional(), x)
    op, dense = post.lazy_covariance_matrix, post.covariance_matrix
    torch.testing.assert_close(op.to_dense(), dense)
    torch.testing.assert_close(post.variance, dense.diagonal(dim1=-2, dim2=-1).reshape(T, 4, D), rtol=1e-12, atol=0)
    torch.testing.assert_close(op.point_blocks()[:, 1], dense[:, D : 2 * D, D : 2 * D], rtol=1e-12, atol=0)
    rhs = torch.randn(T, 4 * D, 3, dtype=DTYPE, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(op.matmul(rhs), dense @ rhs, rtol=1e-10, atol=1e-12)


def test_integrated_gradients_mean_quadrature_and_completeness(model):
    x = _points(seed=4)
    b = torch.tensor([0.1, -0.3], dtype=DTYPE)
    ig = PosteriorIntegratedGradients(model, baseline=b)
    attr = ig(x)
    assert attr.mean.shape == (T, M, D)
    t_nodes, w = np.polynomial.legendre.leggauss(64)
    ref = torch.zeros(T, M, D, dtype=DTYPE)
    for tn, wn in zip((t_nodes + 1) / 2, w / 2, strict=True):
        ref += wn * _model_gradients(model, b + float(tn) * (x - b))
    ref = ref * (x - b)
    _rel(attr.mean, ref, 1e-9, "IG mean")
    gaps = ig.completeness(x)
    assert gaps.mean_gap.shape == (T, M)
    assert gaps.mean_gap.abs().max() < 1e-9 * gaps.prediction_difference_mean.abs().max()
    tol = 1e-6 if isinstance(model.covar_module.base_kernel, MaternKernel) else 1e-9
    assert gaps.variance_gap.abs().max() < tol * gaps.prediction_difference_variance.abs().max()
    # the same through the functional directly, and the public PosteriorGradient
    direct = variational_functional_posterior(model, IntegratedGradientFunctional(b), x)
    torch.testing.assert_close(direct.mean, attr.mean)
    torch.testing.assert_close(PosteriorGradient(model)(x).mean, _model_gradients(model, x), rtol=1e-9, atol=1e-12)


def test_classification_refuses_lmc_clearly():
    model = LMCModel().eval()
    with pytest.raises(NotImplementedError, match="LMCVariationalStrategy"):
        expected_probability_gradient(model, BernoulliLikelihood(), _points())
    with pytest.raises(NotImplementedError, match="LMCVariationalStrategy"):
        latent_gradient_moments(model, _points())
