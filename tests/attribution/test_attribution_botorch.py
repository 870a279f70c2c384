"""Attribution GPs of BoTorch models in the units the user sees (raw X, raw y), against autograd of
``model.posterior(X).mean`` and central finite differences of ``model.posterior(X).mvn``'s covariance (float64)."""

from __future__ import annotations

import warnings

import pytest
import torch

from gpytorch_explain import PosteriorGradient, PosteriorIntegratedGradients
from gpytorch_explain.attribution.adaptive import AutogradFallbackWarning

botorch = pytest.importorskip("botorch")
from botorch.models import MixedSingleTaskGP, SingleTaskGP  # noqa: E402
from botorch.models.transforms import Normalize, Standardize  # noqa: E402

from tests.helpers import assert_close_to_scale as _close  # noqa: E402

DTYPE = torch.float64


def _data(n=25, seed=0):
    g = torch.Generator().manual_seed(seed)
    lo = torch.tensor([0.0, 100.0, -5.0], dtype=DTYPE)
    hi = torch.tensor([2.0, 400.0, 5.0], dtype=DTYPE)
    X = lo + (hi - lo) * torch.rand(n, 3, generator=g, dtype=DTYPE)
    y = 50 + 20 * torch.sin(2 * X[:, 0]) + 0.05 * X[:, 1] + X[:, 2] ** 2
    return X, y.unsqueeze(-1), lo, hi


def _fit_free(model):
    """Fixed, plausible hyperparameters (no optimisation: fast and deterministic)."""
    model.likelihood.noise = 1e-3
    covar = model.covar_module
    base = getattr(covar, "base_kernel", covar)
    if hasattr(base, "lengthscale") and base.lengthscale is not None:
        base.lengthscale = 0.35
    return model.eval()


def _posterior(model, Z):
    with torch.no_grad():
        mvn = model.posterior(Z).mvn
    return mvn.mean, mvn.covariance_matrix


def _fd_cov(model, x, h):
    """Richardson-extrapolated central differences with per-column steps ``h`` ``(D,)``."""

    def central(h):
        m, D = x.shape
        eye = torch.diag(h)
        plus = (x[:, None, :] + eye).reshape(-1, D)
        minus = (x[:, None, :] - eye).reshape(-1, D)
        _, C = _posterior(model, torch.cat([plus, minus]))
        k = m * D
        hh = h.repeat(m)
        return (C[:k, :k] - C[:k, k:] - C[k:, :k] + C[k:, k:]) / (4 * hh[:, None] * hh)

    return (4 * central(h) - central(2 * h)) / 3


def _grad_mean(model, x):
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model.posterior(xg).mean.sum(), xg)
    return g


def test_single_task_gp_with_normalize_and_standardize():
    X, Y, lo, hi = _data()
    model = SingleTaskGP(X, Y, input_transform=Normalize(3), outcome_transform=Standardize(1))
    model = _fit_free(model)
    x = torch.tensor([[0.4, 150.0, 1.0], [1.5, 320.0, -2.5]], dtype=DTYPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutogradFallbackWarning)  # Normalize/Standardize: closed forms, chain rule
        pg = PosteriorGradient(model)
    assert pg.method == "closed_form"
    post = pg(x)
    _close(post.mean, _grad_mean(model, x), 1e-10, "gradient mean (raw units)")
    # columns have very different scales: compare each covariance entry to its own diagonal scale
    ref = _fd_cov(model, x, h=1e-3 * (hi - lo))
    sd = ref.diagonal().sqrt()
    _close(post.covariance_matrix / (sd[:, None] * sd), ref / (sd[:, None] * sd), 1e-5, "gradient correlation")
    _close(post.variance.reshape(-1), ref.diagonal(), 1e-5, "gradient variance")
    auto = PosteriorGradient(model, method="autograd")(x)  # the fallback agrees with the chain rule
    _close(auto.covariance_matrix / (sd[:, None] * sd), post.covariance_matrix / (sd[:, None] * sd), 1e-7, "auto")

    # IG: completeness against the BoTorch posterior (raw units), default baseline = the raw training mean
    ig = PosteriorIntegratedGradients(model)
    assert ig.method == "closed_form"
    assert torch.allclose(ig.baselines[0], X.mean(0))
    ig_auto = PosteriorIntegratedGradients(model, order=48, method="autograd")(x)
    _close(ig(x).mean, ig_auto.mean, 1e-8, "IG mean, closed vs autograd")
    _close(ig(x).covariance_matrix, ig_auto.covariance_matrix, 1e-7, "IG covariance, closed vs autograd")
    gaps = ig.completeness(x)
    mean_scale = gaps.prediction_difference_mean.abs().max()
    var_scale = gaps.prediction_difference_variance.abs().max()
    assert gaps.mean_gap.abs().max() < 1e-7 * mean_scale
    assert gaps.variance_gap.abs().max() < 1e-5 * var_scale
    # direct check of f(x) - f(b) with the BoTorch posterior
    mean_xb, _ = _posterior(model, torch.cat([x, ig.baselines]))
    diff = mean_xb[:2] - mean_xb[2]
    _close(ig(x).mean.sum(-1), diff, 1e-7, "sum of IG = f(x) - f(b)")


def test_multi_output_single_task_gp():
    X, Y, _, _ = _data()
    Y2 = torch.cat([Y, -3 * Y + X[:, :1]], -1)
    model = _fit_free(SingleTaskGP(X, Y2, input_transform=Normalize(3), outcome_transform=Standardize(2)))
    x = torch.tensor([[0.4, 150.0, 1.0], [1.5, 320.0, -2.5]], dtype=DTYPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutogradFallbackWarning)
        post = PosteriorGradient(model)(x)
    assert post.mean.shape == (2, 2, 3)  # (outputs, points, features)
    for t in range(2):
        xg = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(model.posterior(xg).mean[..., t].sum(), xg)
        _close(post.mean[t], g, 1e-10, f"output {t} gradient mean")


def test_mixed_single_task_gp_continuous_columns():
    X, Y, lo, hi = _data()
    X[:, 2] = (X[:, 2] > 0).to(DTYPE)  # a binary categorical column
    model = MixedSingleTaskGP(
        X, Y, cat_dims=[2], input_transform=Normalize(3, indices=[0, 1]), outcome_transform=Standardize(1)
    )
    model = _fit_free(model)
    x = torch.tensor([[0.4, 150.0, 1.0], [1.5, 320.0, 0.0]], dtype=DTYPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutogradFallbackWarning)
        pg = PosteriorGradient(model)
    with pytest.warns(UserWarning, match=r"columns \[2\] have exactly zero gradient"):
        post = pg(x)
    ref = _grad_mean(model, x)
    _close(post.mean[:, :2], ref[:, :2], 1e-10, "continuous gradient mean")
    cont = torch.tensor([0, 1, 3, 4])  # interleaved indices of the continuous columns
    fd = _fd_cov(model, x, h=1e-3 * (hi - lo))[cont][:, cont]
    got = post.covariance_matrix[cont][:, cont]
    sd = fd.diagonal().sqrt()
    _close(got / (sd[:, None] * sd), fd / (sd[:, None] * sd), 1e-5, "continuous gradient correlation")


# raw-unit data on purpose
@pytest.mark.filterwarnings("ignore:Data \\(input features\\) is not contained:Warning")
# raw-unit data on purpose
@pytest.mark.filterwarnings("ignore:Data \\(outcome observations\\) is not standardized:Warning")
def test_partial_normalize_takes_the_fallback_with_a_reason():
    X, Y, lo, hi = _data()
    model = _fit_free(SingleTaskGP(X, Y, input_transform=Normalize(3, indices=[0, 1]), outcome_transform=None))
    with pytest.warns(AutogradFallbackWarning, match="input_transform"):
        pg = PosteriorGradient(model)
    x = torch.tensor([[0.4, 150.0, 1.0]], dtype=DTYPE)
    _close(pg(x).mean, _grad_mean(model, x), 1e-10, "gradient mean")
