"""Attribution GPs of variational (ApproximateGP) models against independent references (float64).

* The gradient GP against central finite differences of the model's own variational predictive ``model(x)``
  (whitened and unwhitened strategies, RBF/ARD closed forms and Matérn-5/2 through the generic path, zero /
  constant / linear means, every Gaussian variational distribution, independent multitask outputs).
* Whitened and unwhitened strategies holding the same q(u) give the same attribution GPs.
* With the inducing points at the training inputs and q(u) the exact posterior of f(X), the attribution GPs
  equal the ExactGP's.
* Integrated gradients are complete in mean and in distribution under the variational predictive.
* Unsupported strategies, train mode and bad inputs raise clear errors.

Tests going through ``PosteriorGradient`` / ``PosteriorIntegratedGradients`` are skipped until those accept an
``ApproximateGP`` (see ``_wired``).
"""

from __future__ import annotations

import copy

import gpytorch
import pytest
import torch
from gpytorch.variational import (
    CholeskyVariationalDistribution,
    CiqVariationalStrategy,
    DeltaVariationalDistribution,
    IndependentMultitaskVariationalStrategy,
    LargeBatchVariationalStrategy,
    MeanFieldVariationalDistribution,
    NaturalVariationalDistribution,
    UnwhitenedVariationalStrategy,
    VariationalStrategy,
)

from gpytorch_explain import ModelStateError, PosteriorGradient, PosteriorIntegratedGradients
from gpytorch_explain.attribution import GradientFunctional, IntegratedGradientFunctional
from gpytorch_explain.attribution.variational import (
    SUPPORTED_STRATEGIES,
    variational_conditioning,
    variational_functional_posterior,
    variational_inducing_points,
)
from tests.helpers import assert_rel_close as _rel_close

DTYPE = torch.float64
D = 3
NUM_INDUCING = 10
NO_BATCH = torch.Size()

STRATEGIES = {
    "whitened": VariationalStrategy,
    "unwhitened": UnwhitenedVariationalStrategy,
    "large_batch": LargeBatchVariationalStrategy,
}
DISTRIBUTIONS = {
    "cholesky": CholeskyVariationalDistribution,
    "meanfield": MeanFieldVariationalDistribution,
    "delta": DeltaVariationalDistribution,
    "natural": NaturalVariationalDistribution,
}


# =============================================================================================
# models
# =============================================================================================
class SVGP(gpytorch.models.ApproximateGP):
    def __init__(self, Z, kernel, mean=None, strategy="whitened", distribution="cholesky", num_tasks=None):
        batch = torch.Size([num_tasks]) if num_tasks else torch.Size()
        dist = DISTRIBUTIONS[distribution](Z.size(-2), batch_shape=batch)
        base = STRATEGIES[strategy](self, Z, dist, learn_inducing_locations=True)
        if num_tasks:
            base = IndependentMultitaskVariationalStrategy(base, num_tasks=num_tasks)
        super().__init__(base)
        self.mean_module = mean if mean is not None else gpytorch.means.ZeroMean()
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


class ExactModel(gpytorch.models.ExactGP):
    def __init__(self, x, y, kernel, mean):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = mean
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _kernel(name: str, batch: torch.Size = NO_BATCH):
    k = gpytorch.kernels
    if name == "ard":
        kern = k.ScaleKernel(k.RBFKernel(ard_num_dims=D, batch_shape=batch), batch_shape=batch)
        kern.base_kernel.lengthscale = torch.linspace(0.7, 1.4, D)
        kern.outputscale = 1.3
    elif name == "rbf":
        kern = k.RBFKernel(batch_shape=batch)
        kern.lengthscale = 0.9
    elif name == "matern52":
        kern = k.ScaleKernel(k.MaternKernel(nu=2.5, ard_num_dims=D, batch_shape=batch), batch_shape=batch)
        kern.base_kernel.lengthscale = torch.linspace(0.9, 1.3, D)
        kern.outputscale = 0.8
    else:
        raise ValueError(name)
    return kern


def _mean(name: str, batch: torch.Size = NO_BATCH):
    if name == "zero":
        return gpytorch.means.ZeroMean()
    if name == "constant":
        mean = gpytorch.means.ConstantMean(batch_shape=batch)
        mean.constant.data.fill_(0.4)
        return mean
    mean = gpytorch.means.LinearMean(D, batch_shape=batch)
    mean.weights.data = torch.linspace(-0.5, 0.8, D).expand(*batch, D).unsqueeze(-1).clone()
    mean.bias.data.fill_(0.2)
    return mean


def _base(model):
    strategy = model.variational_strategy
    return getattr(strategy, "base_variational_strategy", strategy)


def _random_q(u: int, batch: torch.Size = NO_BATCH, seed: int = 0, scale: float = 1.0):
    """A random q(u) = N(m, S) with S positive definite."""
    gen = torch.Generator().manual_seed(seed)
    m = 0.7 * torch.randn(*batch, u, generator=gen, dtype=DTYPE)
    A = 0.25 * torch.randn(*batch, u, u, generator=gen, dtype=DTYPE)
    S = scale * (A @ A.mT + 0.2 * torch.eye(u, dtype=DTYPE))
    return m, S


def _set_q(model, m, S) -> None:
    """Set the variational parameters so that q(u) = N(m, S) (S ignored for a Delta distribution)."""
    strategy = _base(model)
    dist = strategy._variational_distribution
    with torch.no_grad():
        if isinstance(dist, CholeskyVariationalDistribution):
            dist.variational_mean.copy_(m)
            dist.chol_variational_covar.copy_(torch.linalg.cholesky(S))
        elif isinstance(dist, MeanFieldVariationalDistribution):
            dist.variational_mean.copy_(m)
            dist._variational_stddev.copy_(S.diagonal(dim1=-2, dim2=-1).sqrt())
        elif isinstance(dist, DeltaVariationalDistribution):
            dist.variational_mean.copy_(m)
        else:
            dist.initialize_variational_distribution(gpytorch.distributions.MultivariateNormal(m, S))
        strategy.variational_params_initialized.fill_(1)
    model.train()  # clears the strategy's memoised q(u) and Cholesky factor
    model.eval()


def _svgp(kernel="ard", mean="zero", strategy="whitened", distribution="cholesky", seed=0, num_tasks=None, Z=None):
    batch = torch.Size([num_tasks]) if num_tasks else torch.Size()
    gen = torch.Generator().manual_seed(100 + seed)
    if Z is None:
        Z = torch.rand(*batch, NUM_INDUCING, D, generator=gen, dtype=DTYPE) * 2 - 1
    model = SVGP(Z, _kernel(kernel, batch), _mean(mean, batch), strategy, distribution, num_tasks).to(DTYPE)
    m, S = _random_q(Z.size(-2), batch, seed=seed, scale=1.0 if strategy != "unwhitened" else 0.3)
    _set_q(model, m, S)
    return model


def _points(m: int = 3, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(m, D, generator=gen, dtype=DTYPE) * 2 - 1


def _jitter(model) -> float:
    """The jitter GPyTorch's whitened strategies add to the predictive covariance of f (not part of q(∂f))."""
    strategy = _base(model)
    return strategy.jitter_val if isinstance(strategy, VariationalStrategy) else 0.0


def _predictive(model, pts, task=None):
    """The model's own variational predictive (mean, covariance) of the latent at ``pts``, jitter removed."""
    with torch.no_grad():
        out = model(pts)
        mean, cov = out.mean, out.covariance_matrix
    if task is not None:  # multitask: (P, t) means, interleaved (P·t) covariance
        P, t = mean.shape
        mean = mean[:, task]
        cov = cov.reshape(P, t, P, t)[:, task, :, task]
    return mean, cov - _jitter(model) * torch.eye(cov.size(-1), dtype=DTYPE)


def _fd_gradient(model, xs, h=1e-4, task=None):
    """Central finite differences of the predictive mean and covariance: E[∇f], Cov(∇f, ∇f), interleaved."""
    eye = torch.eye(D, dtype=DTYPE)
    plus = (xs.unsqueeze(1) + h * eye).reshape(-1, D)
    minus = (xs.unsqueeze(1) - h * eye).reshape(-1, D)
    mean, c = _predictive(model, torch.cat([plus, minus]), task)
    n = xs.size(0) * D
    fd_mean = (mean[:n] - mean[n:]) / (2 * h)
    fd_cov = (c[:n, :n] - c[:n, n:] - c[n:, :n] + c[n:, n:]) / (4 * h * h)
    return fd_mean, fd_cov


def _wired() -> bool:
    """Whether PosteriorGradient / PosteriorIntegratedGradients accept an ApproximateGP yet."""
    try:
        PosteriorGradient(_svgp())
    except NotImplementedError:
        return False
    return True


WIRED = _wired()
needs_wiring = pytest.mark.skipif(not WIRED, reason="PosteriorGradient does not accept ApproximateGP models yet")


# =============================================================================================
# (1) gradient GP vs finite differences of the model's own predictive
# =============================================================================================
@pytest.mark.parametrize("strategy", ["whitened", "unwhitened"])
@pytest.mark.parametrize("kernel", ["ard", "matern52"])
@pytest.mark.parametrize("mean", ["zero", "constant", "linear"])
def test_gradient_gp_matches_finite_differences(strategy, kernel, mean):
    model = _svgp(kernel, mean, strategy)
    xs = _points()
    xs[2] = _base(model).inducing_points[4].detach()  # an inducing point: coincident inputs
    with torch.no_grad():
        grad = variational_functional_posterior(model, GradientFunctional(), xs)
        cov = grad.covariance_matrix
    fd_mean, fd_cov = _fd_gradient(model, xs)
    assert grad.mean.shape == (3, D) and cov.shape == (3 * D, 3 * D)
    _rel_close(grad.mean.reshape(-1), fd_mean, 1e-6, "gradient mean vs FD")
    _rel_close(cov, fd_cov, 2e-6, "gradient covariance vs FD")
    torch.testing.assert_close(grad.variance.reshape(-1), cov.diagonal())
    assert torch.allclose(cov, cov.mT, atol=1e-12) and torch.linalg.eigvalsh(cov).min() > -1e-8


@pytest.mark.parametrize("strategy", ["whitened", "unwhitened", "large_batch"])
@pytest.mark.parametrize("distribution", ["meanfield", "delta", "natural"])
def test_variational_distributions_match_finite_differences(strategy, distribution):
    model = _svgp("rbf", "linear", strategy, distribution, seed=3)
    xs = _points(2, seed=4)
    with torch.no_grad():
        grad = variational_functional_posterior(model, GradientFunctional(), xs)
    fd_mean, fd_cov = _fd_gradient(model, xs)
    _rel_close(grad.mean.reshape(-1), fd_mean, 1e-6, f"{distribution} gradient mean vs FD")
    _rel_close(grad.covariance_matrix, fd_cov, 2e-6, f"{distribution} gradient covariance vs FD")


@pytest.mark.parametrize("strategy", ["whitened", "unwhitened"])
def test_independent_multitask_matches_finite_differences_per_task(strategy):
    tasks = 2
    model = _svgp("ard", "linear", strategy, num_tasks=tasks, seed=5)
    kern = model.covar_module.base_kernel
    kern.lengthscale = torch.stack([torch.linspace(0.7, 1.4, D), torch.linspace(1.2, 0.8, D)]).unsqueeze(-2)
    model.train()
    model.eval()
    xs = _points(2, seed=6)
    with torch.no_grad():
        grad = variational_functional_posterior(model, GradientFunctional(), xs)
    assert grad.mean.shape == (tasks, 2, D) and grad.variance.shape == (tasks, 2, D)
    for task in range(tasks):
        fd_mean, fd_cov = _fd_gradient(model, xs, task=task)
        _rel_close(grad.mean[task].reshape(-1), fd_mean, 1e-6, f"task {task} gradient mean vs FD")
        _rel_close(grad.covariance_matrix[task], fd_cov, 2e-6, f"task {task} gradient covariance vs FD")


def test_batched_inputs_and_uninitialised_q():
    """Batched x broadcasts; an uninitialised q(u) is initialised exactly as the model's own first call would."""
    model = SVGP(_points(NUM_INDUCING, seed=7), _kernel("ard"), _mean("constant")).to(DTYPE).eval()
    assert not _base(model).variational_params_initialized.item()
    xs = _points(2, seed=8)
    with torch.no_grad():
        grad = variational_functional_posterior(model, GradientFunctional(), xs)
        batched = variational_functional_posterior(model, GradientFunctional(), torch.stack([xs, xs.flip(0)]))
    assert _base(model).variational_params_initialized.item()
    fd_mean, fd_cov = _fd_gradient(model, xs)
    _rel_close(grad.mean.reshape(-1), fd_mean, 1e-6, "gradient mean vs FD after initialisation")
    _rel_close(grad.covariance_matrix, fd_cov, 2e-6, "gradient covariance vs FD after initialisation")
    assert batched.mean.shape == (2, 2, D)
    torch.testing.assert_close(batched.mean[1], grad.mean.flip(0))
    torch.testing.assert_close(batched.variance[0], grad.variance)


# =============================================================================================
# (2) whitened == unwhitened for the same q(u)
# =============================================================================================
@pytest.mark.parametrize("kernel,mean", [("ard", "linear"), ("matern52", "constant")])
def test_whitened_equals_unwhitened_for_the_same_q(kernel, mean):
    whitened = _svgp(kernel, mean, "whitened", seed=9)
    Z = _base(whitened).inducing_points.detach()
    unwhitened = _svgp(kernel, mean, "unwhitened", Z=Z)
    # q(ũ) = N(m_w, S_w) with u = μ(Z) + L ũ  ⇔  q(u) = N(μ(Z) + L m_w, L S_w Lᵀ)
    dist = _base(whitened).variational_distribution
    with torch.no_grad():
        prior = whitened.forward(Z)
        K = prior.covariance_matrix + _base(whitened).jitter_val * torch.eye(NUM_INDUCING, dtype=DTYPE)
        L = torch.linalg.cholesky(K)
        m = prior.mean + L @ dist.mean
        S = L @ dist.covariance_matrix @ L.mT
    _set_q(unwhitened, m, 0.5 * (S + S.mT))
    xs = _points(3, seed=10)
    # the models themselves agree (up to the whitened predictive's jitter)
    mw, cw = _predictive(whitened, xs)
    mu, cu = _predictive(unwhitened, xs)
    _rel_close(mu, mw, 1e-9, "predictive means")
    _rel_close(cu, cw, 1e-8, "predictive covariances")
    baselines = torch.tensor([[0.1, -0.2, 0.0], [-0.3, 0.4, 0.2]], dtype=DTYPE)
    for functional in (GradientFunctional(), IntegratedGradientFunctional(baselines)):
        with torch.no_grad():
            a = variational_functional_posterior(whitened, functional, xs)
            b = variational_functional_posterior(unwhitened, functional, xs)
        _rel_close(b.mean, a.mean, 1e-9, f"{type(functional).__name__} means")
        _rel_close(b.covariance_matrix, a.covariance_matrix, 1e-8, f"{type(functional).__name__} covariances")
        _rel_close(b.variance, a.variance, 1e-8, f"{type(functional).__name__} variances")


# =============================================================================================
# (3) inducing points = training inputs, q(u) = exact posterior ⇒ the ExactGP's attribution GPs
# =============================================================================================
def _exact_and_variational(strategy: str, kernel: str = "ard", mean: str = "linear", noise: float = 1e-2):
    gen = torch.Generator().manual_seed(11)
    X = torch.rand(12, D, generator=gen, dtype=DTYPE) * 2 - 1
    y = torch.sin(2 * X[:, 0]) * X[:, 1] + 0.3 * X[:, 2] + 0.05 * torch.randn(12, generator=gen, dtype=DTYPE)
    kern, mean_module = _kernel(kernel).to(DTYPE), _mean(mean).to(DTYPE)
    exact = ExactModel(X, y, copy.deepcopy(kern), copy.deepcopy(mean_module)).to(DTYPE)
    exact.likelihood.noise = noise
    exact.eval()
    svgp = SVGP(X.clone(), copy.deepcopy(kern), copy.deepcopy(mean_module), strategy).to(DTYPE)
    # With C = K + σ²I and K_ε = K + εI (the strategy's jitter), q(u) reproduces the exact posterior at every x:
    # m − μ(X) = K_ε C⁻¹(y − μ(X)) and K_ε − S = K_ε C⁻¹ K_ε, i.e. S = (σ² − ε) K_ε C⁻¹ (PSD: K_ε, C commute).
    eps = _base(svgp).jitter_val
    with torch.no_grad():
        K = kern(X).to_dense()
        eye = torch.eye(12, dtype=DTYPE)
        C, K_eps = K + noise * eye, K + eps * eye
        mu = mean_module(X)
        u_mean = mu + K_eps @ torch.linalg.solve(C, y - mu)
        u_cov = (noise - eps) * K_eps @ torch.linalg.inv(C)
        u_cov = 0.5 * (u_cov + u_cov.mT)
        if strategy == "whitened":  # ũ = L⁻¹(u − μ(X))
            L = torch.linalg.cholesky(K_eps)
            u_mean = torch.linalg.solve_triangular(L, (u_mean - mu).unsqueeze(-1), upper=False).squeeze(-1)
            half = torch.linalg.solve_triangular(L, u_cov, upper=False)
            u_cov = torch.linalg.solve_triangular(L, half.mT, upper=False).mT
            u_cov = 0.5 * (u_cov + u_cov.mT)
    _set_q(svgp, u_mean, u_cov)
    return exact, svgp, X


@pytest.mark.parametrize("strategy", ["whitened", "unwhitened"])
@pytest.mark.parametrize("kernel", ["ard", "matern52"])
def test_exact_posterior_q_reproduces_exact_gp_attributions(strategy, kernel):
    exact, svgp, X = _exact_and_variational(strategy, kernel)
    xs = _points(3, seed=12)
    xs[1] = X[5]  # a training (= inducing) input
    # the set-up is right: the variational predictive is the exact posterior (up to the whitened jitter)
    with torch.no_grad():
        ref = exact(xs)
    mean, cov = _predictive(svgp, xs)
    _rel_close(mean, ref.mean, 1e-7, "predictive mean")
    _rel_close(cov, ref.covariance_matrix, 1e-6, "predictive covariance")
    b = torch.tensor([0.2, -0.1, 0.3], dtype=DTYPE)
    with torch.no_grad():
        pairs = [
            (variational_functional_posterior(svgp, GradientFunctional(), xs), PosteriorGradient(exact)(xs)),
            (
                variational_functional_posterior(svgp, IntegratedGradientFunctional(b), xs),
                PosteriorIntegratedGradients(exact, b)(xs),
            ),
        ]
    for var, ex in pairs:
        _rel_close(var.mean, ex.mean, 1e-7, "attribution means")
        _rel_close(var.covariance_matrix, ex.covariance_matrix, 1e-7, "attribution covariances")


# =============================================================================================
# (4) completeness of IG under q
# =============================================================================================
@pytest.mark.parametrize("strategy", ["whitened", "unwhitened"])
@pytest.mark.parametrize("kernel,mean", [("ard", "linear"), ("matern52", "constant")])
@pytest.mark.parametrize("num_baselines", [1, 2])
def test_ig_completeness_in_mean_and_distribution(strategy, kernel, mean, num_baselines):
    model = _svgp(kernel, mean, strategy, seed=13)
    xs = _points(3, seed=14)
    gen = torch.Generator().manual_seed(15)
    baselines = torch.rand(num_baselines, D, generator=gen, dtype=DTYPE) - 0.5
    with torch.no_grad():
        attr = variational_functional_posterior(model, IntegratedGradientFunctional(baselines), xs, order=48)
        cov = attr.covariance_matrix.reshape(3, D, 3, D)
    # Σ_i IG_i(x_p) = f(x_p) − mean_r f(b_r), jointly over the points, under the model's own predictive
    mean_f, cov_f = _predictive(model, torch.cat([xs, baselines]))
    W = torch.cat([torch.eye(3, dtype=DTYPE), torch.full((3, num_baselines), -1.0 / num_baselines, dtype=DTYPE)], 1)
    tol = 1e-9 if kernel == "ard" else 1e-7
    _rel_close(attr.mean.sum(-1), W @ mean_f, tol, "completeness in mean")
    _rel_close(cov.sum((1, 3)), W @ cov_f @ W.mT, tol, "completeness in distribution")
    # and the attributions at the baseline itself are exactly zero
    with torch.no_grad():
        at_b = variational_functional_posterior(model, IntegratedGradientFunctional(baselines[:1]), baselines[:1])
    assert at_b.mean.abs().max() < 1e-12 and at_b.variance.abs().max() < 1e-12


def test_latent_matches_model_predictive():
    """VariationalConditioning.latent (used for completeness) is the model's own q(f) without the jitter."""
    for strategy in ("whitened", "unwhitened"):
        model = _svgp("matern52", "linear", strategy, seed=16)
        pts = _points(4, seed=17)
        with torch.no_grad():
            mean, cov = variational_conditioning(model).latent(pts)
        ref_mean, ref_cov = _predictive(model, pts)
        _rel_close(mean, ref_mean, 1e-10, f"{strategy} latent mean")
        _rel_close(cov, ref_cov, 1e-9, f"{strategy} latent covariance")


def test_float32_model_runs():
    model = _svgp("ard", "constant").float()
    model.train()
    model.eval()
    xs = _points(2).float()
    with torch.no_grad():
        grad = variational_functional_posterior(model, GradientFunctional(), xs)
        ref = variational_functional_posterior(model.double(), GradientFunctional(), xs.double())
    assert grad.mean.dtype == torch.float32 and torch.isfinite(grad.variance).all()
    _rel_close(grad.mean.double(), ref.mean, 1e-3, "float32 mean")


# =============================================================================================
# (5) bad input
# =============================================================================================
class MyStrategy(VariationalStrategy):
    """A made-up subclass: its predictive could differ, so it is rejected."""


class CiqModel(gpytorch.models.ApproximateGP):
    """A strategy without attribution GPs (LMC models are supported: tests/attribution/test_attribution_lmc.py)."""

    def __init__(self):
        Z = torch.rand(5, D, dtype=DTYPE)
        dist = CholeskyVariationalDistribution(5)
        super().__init__(CiqVariationalStrategy(self, Z, dist))
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.RBFKernel()

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _custom_strategy_model():
    model = _svgp()
    base = model.variational_strategy
    model.variational_strategy = MyStrategy(model, base.inducing_points.detach(), base._variational_distribution)
    return model.eval()


SUPPORTED_MSG = "VariationalStrategy, LargeBatchVariationalStrategy, UnwhitenedVariationalStrategy"


def test_unsupported_strategies_raise():
    assert set(SUPPORTED_STRATEGIES) >= {VariationalStrategy, UnwhitenedVariationalStrategy}
    xs = _points(1)
    with pytest.raises(NotImplementedError, match=f"MyStrategy.*{SUPPORTED_MSG}"):
        variational_functional_posterior(_custom_strategy_model(), GradientFunctional(), xs)
    with pytest.raises(NotImplementedError, match=f"CiqVariationalStrategy.*{SUPPORTED_MSG}"):
        variational_functional_posterior(CiqModel().to(DTYPE).eval(), GradientFunctional(), xs)


def test_train_mode_and_model_structure_errors():
    model = _svgp()
    model.train()
    with pytest.raises(ModelStateError, match="eval mode"):
        variational_functional_posterior(model, GradientFunctional(), _points(1))
    with pytest.raises(RuntimeError):  # ModelStateError is also a RuntimeError, as GPyTorch raises
        variational_functional_posterior(model, GradientFunctional(), _points(1))
    with pytest.raises(TypeError, match="ApproximateGP"):
        variational_functional_posterior(torch.nn.Linear(2, 2), GradientFunctional(), _points(1))
    # a prior that is not MultivariateNormal(mean_module(x), covar_module(x))
    model = _svgp()
    model.forward = lambda x: gpytorch.distributions.MultivariateNormal(
        model.mean_module(x), model.covar_module(x) * 2.0
    )
    with pytest.raises(NotImplementedError, match="covar_module"):
        variational_functional_posterior(model, GradientFunctional(), _points(1))
    model = _svgp()
    del model.covar_module
    with pytest.raises(NotImplementedError, match="covar_module"):
        variational_functional_posterior(model, GradientFunctional(), _points(1))


def test_bad_points_raise():
    model = _svgp()
    assert variational_inducing_points(model).shape == (NUM_INDUCING, D)
    with pytest.raises(ValueError, match="D = 3"):
        variational_functional_posterior(model, GradientFunctional(), torch.zeros(2, 2, dtype=DTYPE))
    with pytest.raises(ValueError, match="NaN"):
        variational_functional_posterior(model, GradientFunctional(), torch.full((2, D), float("nan"), dtype=DTYPE))
    with pytest.raises(TypeError, match="dtype"):
        variational_functional_posterior(model, GradientFunctional(), torch.zeros(2, D))
    with pytest.raises(ValueError, match="shape"):
        variational_functional_posterior(model, GradientFunctional(), torch.zeros(D, dtype=DTYPE))
    with pytest.raises(TypeError, match="Tensor"):
        variational_functional_posterior(model, GradientFunctional(), [[0.0] * D])
    with pytest.raises(TypeError, match="floating"):
        variational_functional_posterior(model, GradientFunctional(), torch.zeros(2, D, dtype=torch.long))


# =============================================================================================
# through PosteriorGradient / PosteriorIntegratedGradients (once wired)
# =============================================================================================
@needs_wiring
@pytest.mark.parametrize("strategy", ["whitened", "unwhitened"])
def test_public_classes_accept_approximate_gp(strategy):
    model = _svgp("ard", "linear", strategy, seed=18)
    xs = _points(3, seed=19)
    b = torch.tensor([[0.1, -0.2, 0.0], [-0.3, 0.4, 0.2]], dtype=DTYPE)
    with torch.no_grad():
        grad = PosteriorGradient(model)(xs)
        ref = variational_functional_posterior(model, GradientFunctional(), xs)
        ig = PosteriorIntegratedGradients(model, baseline=b)
        attr = ig(xs)
        ref_attr = variational_functional_posterior(model, IntegratedGradientFunctional(b), xs)
        gaps = ig.completeness(xs)
    torch.testing.assert_close(grad.mean, ref.mean)
    torch.testing.assert_close(grad.covariance_matrix, ref.covariance_matrix)
    torch.testing.assert_close(attr.mean, ref_attr.mean)
    torch.testing.assert_close(attr.covariance_matrix, ref_attr.covariance_matrix)
    assert gaps.mean_gap.abs().max() < 1e-9 and gaps.variance_gap.abs().max() < 1e-9
    # finite differences through the public class too
    fd_mean, fd_cov = _fd_gradient(model, xs)
    _rel_close(grad.mean.reshape(-1), fd_mean, 1e-6, "public gradient mean vs FD")
    _rel_close(grad.covariance_matrix, fd_cov, 2e-6, "public gradient covariance vs FD")


@needs_wiring
def test_public_classes_default_baseline_and_quadrature_error():
    model = _svgp("matern52", "zero", seed=20)
    xs = _points(2, seed=21)
    ig = PosteriorIntegratedGradients(model)
    torch.testing.assert_close(ig.baselines, variational_inducing_points(model).mean(0, keepdim=True))
    mean_err, var_err = ig.quadrature_error(xs)
    assert mean_err.shape == (2, D) and torch.isfinite(var_err).all()


@needs_wiring
@pytest.mark.parametrize("strategy", ["whitened", "unwhitened"])
def test_public_classes_reproduce_exact_gp(strategy):
    exact, svgp, _ = _exact_and_variational(strategy)
    xs = _points(3, seed=22)
    b = torch.tensor([0.2, -0.1, 0.3], dtype=DTYPE)
    with torch.no_grad():
        for cls, kwargs in ((PosteriorGradient, {}), (PosteriorIntegratedGradients, {"baseline": b})):
            var, ex = cls(svgp, **kwargs)(xs), cls(exact, **kwargs)(xs)
            _rel_close(var.mean, ex.mean, 1e-7, f"{cls.__name__} means")
            _rel_close(var.covariance_matrix, ex.covariance_matrix, 1e-7, f"{cls.__name__} covariances")


@needs_wiring
def test_public_classes_errors():
    with pytest.raises(NotImplementedError, match=SUPPORTED_MSG):
        PosteriorGradient(CiqModel().to(DTYPE).eval())
    with pytest.raises(NotImplementedError, match=SUPPORTED_MSG):
        PosteriorIntegratedGradients(_custom_strategy_model(), baseline=torch.zeros(D, dtype=DTYPE))
    model = _svgp()
    grad = PosteriorGradient(model)
    model.train()
    with pytest.raises(ModelStateError, match="eval mode"):
        grad(_points(1))
    model.eval()
    with pytest.raises(ValueError, match="D = 3"):
        grad(torch.zeros(1, 2, dtype=DTYPE))
