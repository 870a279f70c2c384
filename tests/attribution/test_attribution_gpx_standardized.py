"""Attribution GPs of a ``GPXModel`` built with ``standardize_x``, ``standardize_y`` or ``intercept``, in raw units.

The model keeps its data and ``model(x)`` in raw units; the attributions must be those of that raw latent. The
references (float64) are independent of the attribution code:

* autograd of the model's own raw posterior mean ``model(x).mean`` (gradients) and a 96-node Gauss–Legendre
  integral of it along the raw straight path (integrated gradients);
* central finite differences of the model's own joint posterior covariance (``model(X).covariance_matrix``,
  off-diagonal blocks between distinct sample rows, where GPX's per-sample weight noise does not enter);
* the chain rule: a plain ``GPXModel`` fitted on ``x / s_x`` and ``(y - m) / s_y`` with the same hyperparameters
  (the same model), whose attributions map to raw units as :math:`\\partial_i f = (s_y / s_i)\\tilde\\partial_i
  \\tilde f` and :math:`\\mathrm{IG}_i f = s_y\\,\\widetilde{\\mathrm{IG}}_i` (baseline mapped the same way);
* completeness in raw units, :math:`\\sum_i \\mathrm{IG}_i = f(\\mathbf x) - f(\\mathbf b)`.

The data have columns of std 1e-2 and 1e3 and y ≈ 150 + signal, so any unit slip (a missing :math:`s_y`,
:math:`c_l` or :math:`1/s_i`) is off by orders of magnitude.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import RBFKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.means import LinearMean

from gpytorch_explain import GPXModel, PosteriorGradient, PosteriorIntegratedGradients, global_importance
from gpytorch_explain.models.gpx_checks import column_scale

DTYPE = torch.float64
SCALES = torch.tensor([1e-2, 1e3], dtype=DTYPE)
#: options that do not scale x get columns near unit scale (GPX on raw columns of std 1e-2 and 1e3 is the
#: ill-posed model that standardize_x exists for)
UNIT_SCALES = torch.tensor([0.5, 2.0], dtype=DTYPE)
OPTIONS = {
    "standardize_x": dict(standardize_x=True),
    "standardize_y": dict(standardize_y=True),
    "intercept": dict(intercept=True),
    "all": dict(standardize_x=True, standardize_y=True, intercept=True),
}


def _truth(x: torch.Tensor, scales: torch.Tensor = SCALES) -> torch.Tensor:
    u = x / scales
    return 150.0 + 12.0 * torch.sin(1.5 * u[:, 0]) * (1.0 + 0.5 * u[:, 1]) + 6.0 * u[:, 1]


def _data(n: int = 24, seed: int = 0, scales: torch.Tensor = SCALES) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g, dtype=DTYPE) * scales
    y = _truth(x, scales) + 0.05 * torch.randn(n, generator=g, dtype=DTYPE)
    return x, y


def _model(options: dict, n: int = 24, max_iter: int = 12) -> GPXModel:
    scales = SCALES if options.get("standardize_x") else UNIT_SCALES
    x, y = _data(n, scales=scales)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the scale warning of models without standardize_y
        base = None
        if not options.get("standardize_x"):  # an ARD kernel with raw-unit lengthscales, as the user would pass
            base = ScaleKernel(RBFKernel(ard_num_dims=2)).to(DTYPE)
            base.base_kernel.lengthscale = 1.5 * scales
        model = GPXModel(x, y, base_kernel=base, **options).fit(max_iter=max_iter)
    return model.eval()


_CACHE: dict[str, GPXModel] = {}


def _cached(name: str) -> GPXModel:
    if name not in _CACHE:
        _CACHE[name] = _model(OPTIONS[name])
    return _CACHE[name]


def _points(model: GPXModel, m: int = 3, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    X = model.train_inputs[0]
    return X[:m] + 0.3 * column_scale(X) * torch.randn(m, X.size(-1), generator=g, dtype=DTYPE)


def _per_column_close(a: torch.Tensor, b: torch.Tensor, rtol: float, what: str) -> None:
    """``|a - b| <= rtol * max |b|`` per feature column (the columns differ by orders of magnitude)."""
    scale = b.abs().reshape(-1, b.size(-1)).amax(0).clamp_min(1e-300)
    err = ((a - b).abs().reshape(-1, b.size(-1)).amax(0) / scale).max().item()
    assert err <= rtol, f"{what}: per-column relative error {err:.3e} > {rtol:.1e}"


def _cov_close(a: torch.Tensor, b: torch.Tensor, rtol: float, what: str) -> None:
    """``|a_ij - b_ij| <= rtol * sqrt(b_ii b_jj)`` (the Cauchy–Schwarz scale of each entry)."""
    d = b.diagonal().clamp_min(0).sqrt()
    err = ((a - b).abs() / (d[:, None] * d).clamp_min(1e-300)).max().item()
    assert err <= rtol, f"{what}: error {err:.3e} of the entries' scale > {rtol:.1e}"


def _autograd_mean_grad(model: GPXModel, x: torch.Tensor) -> torch.Tensor:
    """∇ of the model's own raw-unit posterior mean (mean module and un-standardisation included)."""
    x = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model(x).mean.sum(), x)
    return g


def _fd_cov(model: GPXModel, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    r"""Central differences :math:`\partial_i\partial'_j \operatorname{Cov}(f(\mathbf x_p), f(\mathbf x_q))` of the
    model's joint posterior, ``(m·D, m·D)`` interleaved. The two arguments are separate rows of one joint call, so
    every entry used is a cross-covariance between distinct samples (no weight-noise diagonal)."""
    m, D = x.shape
    eye = torch.diag(h)
    plus = (x[:, None, :] + eye).reshape(-1, D)
    minus = (x[:, None, :] - eye).reshape(-1, D)
    k = m * D
    with torch.no_grad():
        C = model(torch.cat([plus, minus, plus.clone(), minus.clone()])).covariance_matrix
    pp, pm = C[:k, 2 * k : 3 * k], C[:k, 3 * k :]
    mp, mm = C[k : 2 * k, 2 * k : 3 * k], C[k : 2 * k, 3 * k :]
    hh = h.repeat(m)
    return (pp - pm - mp + mm) / (4 * hh[:, None] * hh)


def _gauss_legendre_ig(model: GPXModel, x: torch.Tensor, b: torch.Tensor, nodes: int = 96) -> torch.Tensor:
    """Brute-force IG of the raw posterior mean: Gauss–Legendre on [0, 1] of autograd gradients along b → x."""
    t, w = np.polynomial.legendre.leggauss(nodes)
    t = torch.as_tensor((t + 1) / 2, dtype=DTYPE)
    w = torch.as_tensor(w / 2, dtype=DTYPE)
    delta = x - b
    path = (b + t[:, None, None] * delta).reshape(-1, x.size(-1))
    grads = _autograd_mean_grad(model, path).reshape(nodes, *x.shape)
    return delta * (w[:, None, None] * grads).sum(0)


# =============================================================================================
# gradients
# =============================================================================================
@pytest.mark.parametrize("name", list(OPTIONS))
def test_gradient_mean_is_autograd_of_the_raw_posterior_mean(name):
    model = _cached(name)
    xs = _points(model)
    with torch.no_grad():
        grad = PosteriorGradient(model)(xs)
    assert grad.method == "closed_form"
    _per_column_close(grad.mean, _autograd_mean_grad(model, xs), 1e-9, f"{name}: gradient mean")


@pytest.mark.parametrize("name", list(OPTIONS))
def test_gradient_covariance_is_finite_differences_of_the_raw_posterior(name):
    model = _cached(name)
    xs = _points(model, m=2)
    with torch.no_grad():
        cov = PosteriorGradient(model)(xs).covariance_matrix
    # step 1e-3 of each column's std: truncation O(1e-6), round-off O(1e-16 / 1e-6) relative
    ref = _fd_cov(model, xs, 1e-3 * column_scale(model.train_inputs[0]))
    _cov_close(cov, ref, 1e-5, f"{name}: gradient covariance")


# =============================================================================================
# integrated gradients
# =============================================================================================
@pytest.mark.parametrize("name", list(OPTIONS))
def test_ig_completeness_and_quadrature_in_raw_units(name):
    model = _cached(name)
    xs = _points(model)
    X = model.train_inputs[0]
    baseline = X[5] + torch.tensor([2.0, -0.3], dtype=DTYPE) * column_scale(X)  # raw units
    with torch.no_grad():
        ig = PosteriorIntegratedGradients(model, baseline=baseline, order=32)  # converged: 64 agrees to 1e-12
        attr = ig(xs)
        fx, fb = model(xs).mean, model(baseline.unsqueeze(0)).mean
        gaps = ig.completeness(xs)
    span = (fx - fb).abs().max()
    assert (attr.mean.sum(-1) - (fx - fb)).abs().max() <= 1e-9 * span, "completeness of the means (raw units)"
    assert gaps.mean_gap.abs().max() <= 1e-9 * span
    assert (gaps.variance_gap.abs() <= 1e-8 * gaps.prediction_difference_variance).all()
    _per_column_close(attr.mean, _gauss_legendre_ig(model, xs, baseline), 1e-8, f"{name}: IG mean vs quadrature")


def test_ig_default_baseline_is_the_raw_training_mean():
    model = _cached("all")
    xs = _points(model)
    with torch.no_grad():
        ig = PosteriorIntegratedGradients(model)
        attr = ig(xs)
        fb = model(ig.baselines).mean
    X = model.train_inputs[0]
    torch.testing.assert_close(ig.baselines, X.mean(0, keepdim=True), rtol=0, atol=0)
    _per_column_close(attr.mean, _gauss_legendre_ig(model, xs, ig.baselines[0]), 1e-8, "IG mean, default baseline")
    with torch.no_grad():
        fx = model(xs).mean
    assert (attr.mean.sum(-1) - (fx - fb)).abs().max() <= 1e-9 * (fx - fb).abs().max()


# =============================================================================================
# the chain rule: a plain GPX model of the standardised data, mapped back
# =============================================================================================
def _standardised_twin(model: GPXModel, options: dict) -> tuple[GPXModel, torch.Tensor, torch.Tensor]:
    """A plain ``GPXModel`` on ``x / s_x``, ``(y - m) / s_y`` with the same hyperparameters (the same posterior)."""
    X, y = model.train_inputs[0], model.train_targets
    s_x = column_scale(X) if options.get("standardize_x") else torch.ones(2, dtype=DTYPE)
    s_y = column_scale(y.unsqueeze(-1))[0] if options.get("standardize_y") else torch.ones((), dtype=DTYPE)
    c = model.covar_module.feature_scale  # kept in float64 (exactly s_y / s_x up to round-off); None: intercept only
    torch.testing.assert_close(torch.ones(2, dtype=DTYPE) if c is None else c, s_y / s_x, rtol=1e-14, atol=0)
    base = ScaleKernel(RBFKernel(ard_num_dims=2)).to(DTYPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # x / s_x is still far from unit scale without standardize_x
        lik = GaussianLikelihood(noise_constraint=GreaterThan(1e-12)).to(DTYPE)  # σ_y² / s_y² may be below 1e-4
        twin = GPXModel(X / s_x, (y - model.intercept) / s_y, likelihood=lik, base_kernel=base)
    twin.base_kernel.outputscale = model.base_kernel.outputscale.detach()
    twin.base_kernel.base_kernel.lengthscale = model.base_kernel.base_kernel.lengthscale.detach() / s_x
    twin.weight_noise = model.weight_noise.detach()
    twin.likelihood.noise = model.likelihood.noise.detach() / s_y**2
    return twin.eval(), s_x, s_y


@pytest.mark.parametrize("name", list(OPTIONS))
def test_attributions_are_the_chain_rule_of_the_standardised_model(name):
    model = _cached(name)
    twin, s_x, s_y = _standardised_twin(model, OPTIONS[name])
    xs = _points(model)
    with torch.no_grad():
        torch.testing.assert_close(model(xs).mean, model.intercept + s_y * twin(xs / s_x).mean, rtol=1e-10, atol=0)
        raw, std = PosteriorGradient(model)(xs), PosteriorGradient(twin)(xs / s_x)
    J = (s_y / s_x).repeat(xs.size(0))  # d f_raw / d x_i = (s_y / s_i) d f̃ / d x̃_i
    _per_column_close(raw.mean, std.mean * (s_y / s_x), 1e-9, f"{name}: gradient mean vs chain rule")
    _cov_close(raw.covariance_matrix, J[:, None] * std.covariance_matrix * J, 1e-9, f"{name}: gradient covariance")
    b = model.train_inputs[0][:2] * 0.5  # two raw baselines (expected IG)
    # the raw straight path is the image of the standardised one, node by node: the chain rule holds exactly at
    # any fixed quadrature order (8 keeps the joint IG covariance cheap; convergence is tested above)
    with torch.no_grad():
        raw = PosteriorIntegratedGradients(model, baseline=b, order=8)(xs)
        std = PosteriorIntegratedGradients(twin, baseline=b / s_x, order=8)(xs / s_x)
    _per_column_close(raw.mean, s_y * std.mean, 1e-9, f"{name}: IG mean vs chain rule")
    _cov_close(raw.covariance_matrix, s_y**2 * std.covariance_matrix, 1e-9, f"{name}: IG covariance vs chain rule")


# =============================================================================================
# a model trained on unscaled data explains the truth
# =============================================================================================
def test_unscaled_data_explained_in_raw_units():
    x, _ = _data(60, seed=3)
    y = _truth(x)
    model = GPXModel(x, y, standardize_x=True, standardize_y=True).fit(max_iter=60)
    g = torch.Generator().manual_seed(4)
    xs = 0.5 * torch.randn(5, 2, generator=g, dtype=DTYPE) * SCALES  # inside the training cloud
    with torch.no_grad():
        grad = PosteriorGradient(model)(xs)
        ig = PosteriorIntegratedGradients(model, baseline=torch.zeros(2, dtype=DTYPE), order=32)
        attr = ig(xs)
    true_grad = _autograd_truth_grad(xs)
    # per-column accuracy of the fitted model's gradient (its posterior std is a few % of the column's scale)
    err = (grad.mean - true_grad).abs().amax(0) / true_grad.abs().amax(0)
    assert (err < 0.1).all(), f"relative gradient error per column {err}"
    true_ig = _truth_ig(xs, torch.zeros(2, dtype=DTYPE))
    err = (attr.mean - true_ig).abs().amax(0) / true_ig.abs().amax(0)
    assert (err < 0.1).all(), f"relative IG error per column {err}"
    imp = global_importance(model, xs, kind="gradient", num_samples=200)
    ratio = imp.expected / true_grad.abs().mean(0)
    assert ((ratio > 0.8) & (ratio < 1.25)).all(), f"global importance / truth = {ratio}"


def _autograd_truth_grad(x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_truth(x).sum(), x)
    return g


def _truth_ig(x: torch.Tensor, b: torch.Tensor, nodes: int = 64) -> torch.Tensor:
    t, w = np.polynomial.legendre.leggauss(nodes)
    t = torch.as_tensor((t + 1) / 2, dtype=DTYPE)
    w = torch.as_tensor(w / 2, dtype=DTYPE)
    path = (b + t[:, None, None] * (x - b)).reshape(-1, 2)
    grads = _autograd_truth_grad(path).reshape(nodes, *x.shape)
    return (x - b) * (w[:, None, None] * grads).sum(0)


# =============================================================================================
# other means, and what stays refused
# =============================================================================================
def test_non_constant_mean_module_is_differentiated():
    model = _model(OPTIONS["all"], max_iter=5)
    model.mean_module = LinearMean(2).to(DTYPE)
    model.mean_module.weights.data = torch.tensor([[300.0], [2e-3]], dtype=DTYPE)
    model.prediction_strategy = None
    xs = _points(model)
    with torch.no_grad():
        grad = PosteriorGradient(model)(xs)
        ig = PosteriorIntegratedGradients(model, order=32)
        attr, gaps = ig(xs), ig.completeness(xs)
    _per_column_close(grad.mean, _autograd_mean_grad(model, xs), 1e-9, "gradient mean with a linear mean")
    _per_column_close(attr.mean, _gauss_legendre_ig(model, xs, ig.baselines[0]), 1e-8, "IG with a linear mean")
    assert gaps.mean_gap.abs().max() <= 1e-9 * gaps.prediction_difference_mean.abs().max()


def test_separate_features_stay_refused_with_standardisation():
    x, y = _data()
    z = torch.cat([x, torch.ones(x.size(0), 1, dtype=DTYPE)], dim=-1)
    model = GPXModel(x, y, z, standardize_x=True, standardize_y=True, intercept=True).eval()
    for cls in (PosteriorGradient, PosteriorIntegratedGradients):
        with pytest.raises(NotImplementedError, match="z = x"):
            cls(model)
