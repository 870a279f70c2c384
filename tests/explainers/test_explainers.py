#!/usr/bin/env python3
"""The explainer adapters against the quantities they wrap, computed independently."""

import importlib.util

import gpytorch
import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from gpytorch_explain import GPXModel
from gpytorch_explain.explainers import (
    ARDExplainer,
    CaptumIGExplainer,
    Explainer,
    ExplainerOutput,
    GPXExplainer,
    GradientInputExplainer,
    IGExplainer,
    KernelShapExplainer,
    KLExplainer,
    LimeExplainer,
    LinearExplainer,
)


class _GP(gpytorch.models.ExactGP):
    def __init__(self, x, y):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=x.size(-1)))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


@pytest.fixture(scope="module")
def gp():
    torch.manual_seed(0)
    x = torch.randn(40, 3, dtype=torch.float64)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2]
    model = _GP(x, y).double()
    model.covar_module.base_kernel.lengthscale = torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64)
    model.likelihood.noise = 0.01
    return model.eval(), x


def test_output_checks_shapes():
    with pytest.raises(ValueError, match="shape of contributions"):
        ExplainerOutput(np.ones((2, 3)), std=np.ones((2, 2)))
    with pytest.raises(TypeError):
        Explainer()  # abstract


def test_gpx_explainer_adds_up_to_latent_mean():
    torch.manual_seed(1)
    x = torch.randn(30, 2, dtype=torch.float64)
    model = GPXModel(x, x[:, 0] * x[:, 1]).fit(max_iter=5)
    out = GPXExplainer(model).explain(x[:4])
    np.testing.assert_allclose(out.contributions.sum(1), model(x[:4]).mean.detach().numpy(), atol=1e-8)
    np.testing.assert_allclose(out.contributions, out.weights * x[:4].numpy(), atol=1e-12)
    assert (out.std >= 0).all()


def test_ig_explainer_completeness(gp):
    model, x = gp
    out = IGExplainer(model).explain(x[:5])
    b = x.mean(0, keepdim=True)
    with torch.no_grad():
        gap = model(x[:5]).mean - model(b).mean
    np.testing.assert_allclose(out.contributions.sum(1), gap.numpy(), atol=1e-8)
    diff = (x[:5] - b).numpy()
    np.testing.assert_allclose(out.weights * diff, out.contributions, atol=1e-12)


def test_gradient_input_explainer_matches_autograd(gp):
    model, x = gp
    t = x[:4].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model(t).mean.sum(), t)
    out = GradientInputExplainer(model).explain(x[:4])
    np.testing.assert_allclose(out.weights, g.numpy(), atol=1e-8)
    np.testing.assert_allclose(out.contributions, (g * x[:4]).numpy(), atol=1e-8)


def test_ard_and_kl_explainers(gp):
    model, x = gp
    out = ARDExplainer(model).explain(x[:2])
    np.testing.assert_allclose(out.weights, [[1.0, 0.5, 0.25]] * 2, atol=1e-12)
    np.testing.assert_allclose(out.contributions, out.weights * x[:2].numpy(), atol=1e-12)
    b = torch.tensor([0.5, 0.0, -1.0], dtype=torch.float64)
    out_b = ARDExplainer(model, baseline=b).explain(x[:2])
    np.testing.assert_allclose(out_b.contributions, out.weights * (x[:2] - b).numpy(), atol=1e-12)
    kl = KLExplainer(model).explain(x[:2])
    assert kl.contributions.shape == (2, 3) and (kl.weights >= 0).all()
    np.testing.assert_allclose(kl.contributions, kl.weights * x[:2].numpy(), atol=1e-12)
    gpr = _GP(x, x[:, 0]).double()
    gpr.covar_module = gpytorch.kernels.RBFKernel().double()
    with pytest.raises(TypeError, match="one lengthscale per feature"):
        ARDExplainer(gpr.eval()).explain(x[:2])


def test_linear_explainer_adds_up_to_prediction_difference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3)) + 2.0
    ridge = Ridge(alpha=1.0).fit(x, x @ [1.0, -1.0, 0.5] + 3.0)
    mu = x.mean(0)
    out = LinearExplainer(ridge, mean=mu).explain(x[:5])
    np.testing.assert_allclose(out.contributions.sum(1), ridge.predict(x[:5]) - ridge.predict(mu[None]), atol=1e-10)


def test_kernel_shap_on_linear_function_is_exact():
    pytest.importorskip("shap")
    w = np.array([1.0, -2.0, 0.5])
    bg = np.array([[0.0, 1.0, 2.0], [2.0, -1.0, 0.0]])
    x = np.array([[1.0, 1.0, 1.0], [3.0, 0.0, -1.0]])
    out = KernelShapExplainer(lambda a: a @ w, bg, nsamples=100).explain(x)
    np.testing.assert_allclose(out.contributions, w * (x - bg.mean(0)), atol=1e-8)


def test_lime_on_linear_function_recovers_weights():
    pytest.importorskip("lime")
    rng = np.random.default_rng(0)
    train = rng.normal(size=(200, 3))
    w = np.array([1.0, -2.0, 0.5])
    out = LimeExplainer(lambda a: a @ w, train, num_samples=2000).explain(train[:2])
    np.testing.assert_allclose(out.weights, np.broadcast_to(w, (2, 3)), atol=0.05)


def test_captum_ig_matches_exact_ig_mean(gp):
    pytest.importorskip("captum")
    model, x = gp
    b = x.mean(0)
    exact = IGExplainer(model, baseline=b).explain(x[:3]).contributions
    cap = CaptumIGExplainer(lambda t: model(t).mean, baseline=b, n_steps=64).explain(x[:3]).contributions
    np.testing.assert_allclose(cap, exact, atol=1e-6)


def test_lime_is_reseeded_per_row_and_rejects_a_vector():
    # LIME's generator carried over across rows and calls: the same row gave other numbers in a second call or
    # inside a batch
    pytest.importorskip("lime")
    rng = np.random.default_rng(1)
    train = rng.normal(size=(100, 3))
    explainer = LimeExplainer(lambda a: np.sin(a[:, 0]) + a[:, 1] * a[:, 2], train, num_samples=300, seed=0)
    both = explainer.explain(train[:2]).weights
    np.testing.assert_array_equal(explainer.explain(train[:2]).weights, both)
    np.testing.assert_array_equal(explainer.explain(train[1:2]).weights[0], both[1])
    with pytest.raises(ValueError, match=r"rows of shape \(m, 3\)"):
        explainer.explain(train[0])


def test_array_baselines_are_accepted(gp):
    model, x = gp
    b = np.array([0.5, 0.0, -1.0])
    expected = ARDExplainer(model, baseline=torch.as_tensor(b)).explain(x[:2]).contributions
    np.testing.assert_allclose(ARDExplainer(model, baseline=b).explain(x[:2]).contributions, expected, atol=0)
    if importlib.util.find_spec("captum") is not None:
        fn = lambda t: model(t).mean  # noqa: E731
        a = CaptumIGExplainer(fn, baseline=b).explain(x[:2]).contributions
        t = CaptumIGExplainer(fn, baseline=torch.as_tensor(b)).explain(x[:2]).contributions
        np.testing.assert_allclose(a, t, atol=0)
