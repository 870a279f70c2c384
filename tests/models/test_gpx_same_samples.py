"""Exact GPX predictions at test inputs equal to (or containing) the training inputs (issue 13, issue 16 item 3).

GPyTorch's ``ExactGP`` slices the lazy joint train+test covariance before evaluating it, so its test/train block is
the kernel at ``(X_test, X_train)``; with ``X_test == X_train`` a GPX kernel sees equal inputs (its joint
covariance, with :math:`\\sigma_w^2\\|\\mathbf z_i\\|^2` on the diagonal), and ``GPXPredictionStrategy`` must remove
that diagonal. References are the dense GP formulas in float64:
:math:`\\mathbb E[f_*] = \\mathbf k_*^\\top\\mathbf C^{-1}\\mathbf y` with :math:`\\mathbf k_*` *without*
:math:`\\sigma_w^2`, and :math:`\\operatorname{Cov}[f_*] = (\\mathbf K_{**} + \\sigma_w^2\\mathbf I)\\odot
\\mathbf Z_*\\mathbf Z_*^\\top - \\mathbf k_*^\\top\\mathbf C^{-1}\\mathbf k_*`.
"""

import gpytorch
import pytest
import torch
from gpytorch.kernels import AdditiveKernel, RBFKernel, ScaleKernel

from gpytorch_explain import GPXKernel, GPXModel, GPXPredictionStrategy
from gpytorch_explain import settings as explain_settings
from tests.helpers import generator

DT = torch.float64
TOL = {"rtol": 1e-8, "atol": 1e-10}
N, D, d = 25, 2, 3
OUTPUTSCALE, LENGTHSCALE, WN, NOISE = 1.3, 0.8, 0.2, 0.05


def _rbf(x1, x2):
    return OUTPUTSCALE * torch.exp(-0.5 * torch.cdist(x1, x2).pow(2) / LENGTHSCALE**2)


def _base():
    base = ScaleKernel(RBFKernel()).to(DT)
    base.outputscale = torch.tensor(OUTPUTSCALE, dtype=DT)
    base.base_kernel.lengthscale = torch.tensor(LENGTHSCALE, dtype=DT)
    return base


def _data(separate_z):
    x = torch.randn(N, D, dtype=DT, generator=generator(0))
    z = torch.randn(N, d, dtype=DT, generator=generator(1)) if separate_z else x
    y = (torch.sin(x).sum(-1, keepdim=True) * z).sum(-1) + 0.1 * torch.randn(N, dtype=DT, generator=generator(2))
    return x, z, y


def _likelihood():
    lik = gpytorch.likelihoods.GaussianLikelihood().to(DT)
    lik.noise = torch.tensor(NOISE, dtype=DT)
    return lik


def _gpx_model(separate_z):
    x, z, y = _data(separate_z)
    model = GPXModel(x, y, z if separate_z else None, likelihood=_likelihood(), base_kernel=_base())
    model.weight_noise = torch.tensor(WN, dtype=DT)
    return model.eval(), x, z, y


class _HandBuilt(gpytorch.models.ExactGP):
    """The GPyTorch tutorial model with a GPX covariance."""

    def __init__(self, inputs, y, covar_module):
        super().__init__(inputs, y, _likelihood())
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = covar_module

    def forward(self, inputs):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(inputs), self.covar_module(inputs))


def _gpx_kernel(separate_z):
    kernel = GPXKernel(_base(), x_dims=D, z_dims=d if separate_z else None).to(DT)
    kernel.weight_noise = torch.tensor(WN, dtype=DT)
    return kernel


def _brute(x, z, y, xs, zs, scale=1.0):
    """Dense GPX posterior of f* (scale: an outer ScaleKernel's output scale on the whole GPX covariance)."""
    eye = torch.eye(N, dtype=DT)
    c = scale * (_rbf(x, x) + WN * eye) * (z @ z.T) + NOISE * eye
    k_star = scale * _rbf(xs, x) * (zs @ z.T)  # no σw²: test and training points are different samples
    prior = scale * (_rbf(xs, xs) + WN * torch.eye(len(xs), dtype=DT)) * (zs @ zs.T)
    mean = k_star @ torch.linalg.solve(c, y)
    return mean, prior - k_star @ torch.linalg.solve(c, k_star.T)


def _test_sets(x, z):
    fresh = torch.randn(4, D, dtype=DT, generator=generator(3))
    fresh_z = torch.randn(4, d, dtype=DT, generator=generator(4)) if z is not x else fresh
    return {
        "train": (x, z),
        "train_copy": (x.clone(), z.clone()),
        "duplicates": (torch.cat([x[:3], fresh, x[:3]]), torch.cat([z[:3], fresh_z, z[:3]])),
        "fresh": (fresh, fresh_z),
        "permuted": (x.flip(0), z.flip(0)),
    }


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("separate_z", [True, False])
@pytest.mark.parametrize("cholesky", [True, False])
def test_gpx_model_predictions_match_brute_force(separate_z, cholesky):
    model, x, z, y = _gpx_model(separate_z)
    limit = 10_000 if cholesky else 0  # the dense Cholesky path, or GPyTorch's CG path (tight tolerance)
    tol = TOL if cholesky else {"rtol": 1e-5, "atol": 1e-6}
    for name, (xs, zs) in _test_sets(x, z).items():
        model.prediction_strategy = None
        with gpytorch.settings.max_cholesky_size(limit), gpytorch.settings.cg_tolerance(1e-10), torch.no_grad():
            out = model(xs, zs) if separate_z else model(xs)
        mean, cov = _brute(x, z, y, xs, zs)
        torch.testing.assert_close(out.mean, mean, **tol, msg=lambda m, name=name: f"{name}: {m}")
        torch.testing.assert_close(out.covariance_matrix, cov, **tol, msg=lambda m, name=name: f"{name}: {m}")
    assert isinstance(model.prediction_strategy, GPXPredictionStrategy)


@pytest.mark.parametrize("separate_z", [True, False])
def test_gpx_model_weights_at_the_training_inputs(separate_z):
    r""":math:`\mathbb E[\mathbf w_*] = \mathbf B^\top\mathbf C^{-1}\mathbf y`, :math:`\operatorname{Cov}[\mathbf w_*]
    = (\mathbf K_{**} + \sigma_w^2\mathbf I)\otimes\mathbf I_d - \mathbf B^\top\mathbf C^{-1}\mathbf B` at
    :math:`\mathbf x_* = \mathbf X`."""
    model, x, z, y = _gpx_model(separate_z)
    dz = z.size(-1)
    eye = torch.eye(N, dtype=DT)
    c = (_rbf(x, x) + WN * eye) * (z @ z.T) + NOISE * eye
    b = (_rbf(x, x).T.unsqueeze(-1) * z.unsqueeze(1)).reshape(N, N * dz)  # B[i, (p, l)] = k(x*_p, x_i) z_il
    mean = (b.T @ torch.linalg.solve(c, y)).reshape(N, dz)
    cov = torch.kron(_rbf(x, x) + WN * eye, torch.eye(dz, dtype=DT)) - b.T @ torch.linalg.solve(c, b)
    with torch.no_grad():
        post = model.predict_weights(x)
    torch.testing.assert_close(post.mean, mean, **TOL)
    torch.testing.assert_close(post.covariance_matrix, cov, **TOL)


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("wrap", ["none", "scale"])
@pytest.mark.parametrize("separate_z", [True, False])
def test_hand_built_exact_gp_predictions_match_brute_force(wrap, separate_z):
    """A user's ``ExactGP`` with ``covar_module = GPXKernel(...)`` (or ``ScaleKernel(GPXKernel(...))``): GPyTorch
    picks ``GPXPredictionStrategy`` through ``Kernel.prediction_strategy``."""
    x, z, y = _data(separate_z)
    kernel = _gpx_kernel(separate_z)
    scale = 1.0
    if wrap == "scale":
        kernel = ScaleKernel(kernel).to(DT)
        scale = 1.7
        kernel.outputscale = torch.tensor(scale, dtype=DT)
    inputs = torch.cat([x, z], -1) if separate_z else x
    model = _HandBuilt(inputs, y, kernel).eval()
    for name, (xs, zs) in _test_sets(x, z).items():
        with torch.no_grad():
            out = model(torch.cat([xs, zs], -1) if separate_z else xs)
        mean, cov = _brute(x, z, y, xs, zs, scale)
        torch.testing.assert_close(out.mean, mean, **TOL, msg=lambda m, name=name: f"{name}: {m}")
        torch.testing.assert_close(out.covariance_matrix, cov, **TOL, msg=lambda m, name=name: f"{name}: {m}")
    assert isinstance(model.prediction_strategy, GPXPredictionStrategy)


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
def test_additive_kernel_needs_eager_kernels_as_documented():
    """Inside ``AdditiveKernel`` GPyTorch's default strategy is chosen; with ``lazily_evaluate_kernels(False)``
    (the GPXKernel docstring's advice) the joint is sliced by sample index and predictions at the training inputs are
    right. The added kernel is a second ScaleKernel(RBF) on the x columns; its covariance enters the reference."""
    x, z, y = _data(True)
    other = ScaleKernel(RBFKernel(active_dims=list(range(D)))).to(DT)
    other.outputscale = torch.tensor(0.4, dtype=DT)
    other.base_kernel.lengthscale = torch.tensor(1.1, dtype=DT)
    model = _HandBuilt(torch.cat([x, z], -1), y, AdditiveKernel(_gpx_kernel(True), other)).eval()

    def k_other(a, b):
        return 0.4 * torch.exp(-0.5 * torch.cdist(a, b).pow(2) / 1.1**2)

    eye = torch.eye(N, dtype=DT)
    c = (_rbf(x, x) + WN * eye) * (z @ z.T) + k_other(x, x) + NOISE * eye
    k_star = _rbf(x, x) * (z @ z.T) + k_other(x, x)
    mean = k_star @ torch.linalg.solve(c, y)
    with gpytorch.settings.lazily_evaluate_kernels(False), torch.no_grad():
        out = model(torch.cat([x, z], -1))
    torch.testing.assert_close(out.mean, mean, **TOL)
    prior = c - NOISE * eye
    torch.testing.assert_close(out.covariance_matrix, prior - k_star @ torch.linalg.solve(c, k_star.T), **TOL)


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("correction", [True, False])
@pytest.mark.parametrize("limit", [10_000, 0])
def test_gpx_model_with_inducing_points_at_the_training_inputs(correction, limit):
    """SGPR base: the test/train block at equal inputs is a ``GPXInducingLinearOperator`` (Woodbury form) whose
    diagonal (σw²‖z‖², plus GPyTorch's SGPR correction (k_ii - q_ii)‖z_i‖² in eval mode) must go; the test/test
    block keeps both. limit 0 takes the inducing-space path (``model(x, z)`` from the weight posterior)."""
    x, z, y = _data(True)
    inducing = torch.randn(6, D, dtype=DT, generator=generator(8))
    base = gpytorch.kernels.InducingPointKernel(_base(), inducing.clone(), _likelihood())
    model = GPXModel(x, y, z, likelihood=_likelihood(), base_kernel=base)
    model.weight_noise = torch.tensor(WN, dtype=DT)
    model.eval()

    def q(a, b):
        return _rbf(a, inducing) @ torch.linalg.solve(_rbf(inducing, inducing), _rbf(inducing, b))

    eye = torch.eye(N, dtype=DT)
    c = (q(x, x) + WN * eye) * (z @ z.T) + NOISE * eye  # the training covariance never has the correction
    for xs, zs in _test_sets(x, z).values():
        k_star = q(xs, x) * (zs @ z.T)
        prior = (q(xs, xs) + WN * torch.eye(len(xs), dtype=DT)) * (zs @ zs.T)
        if correction:
            prior = prior + torch.diag((_rbf(xs, xs).diagonal() - q(xs, xs).diagonal()) * zs.pow(2).sum(-1))
        mean = k_star @ torch.linalg.solve(c, y)
        cov = prior - k_star @ torch.linalg.solve(c, k_star.T)
        model.prediction_strategy = None
        with (
            gpytorch.settings.sgpr_diagonal_correction(correction),
            gpytorch.settings.max_cholesky_size(limit),
            explain_settings.max_cholesky_size(limit),
            torch.no_grad(),
        ):
            out = model(xs, zs)
            torch.testing.assert_close(out.mean, mean, **TOL)
            torch.testing.assert_close(out.covariance_matrix, cov, **TOL)
