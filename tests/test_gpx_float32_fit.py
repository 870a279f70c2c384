"""float32 GPX models are fitted on a float64 copy (gpytorch_explain.fit_gpx_model): the float32 objective made
L-BFGS stop early (issue 13)."""

import gpytorch
import torch

from gpytorch_explain import GPXModel, fit_gpx_model

N, D, M = 150, 3, 10


def _model(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N + 200, D, generator=g, dtype=torch.float64)
    f = x[:, 0] * torch.sin(x[:, 1]) + 0.5 * x[:, 2] * x[:, 0] + x[:, 1]
    y = f + 0.05 * torch.randn(N + 200, generator=g, dtype=torch.float64)
    x, y = x.float().to(dtype), y.float().to(dtype)  # the same (float32-representable) data in both dtypes
    lik = gpytorch.likelihoods.GaussianLikelihood()
    rbf = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D))
    base = gpytorch.kernels.InducingPointKernel(rbf, inducing_points=x[:M].clone(), likelihood=lik)
    return GPXModel(x[:N], y[:N], likelihood=lik, base_kernel=base).to(dtype), x[N:], f[N:]


def _loss64(model):
    """The float64 negative log marginal likelihood per sample at ``model``'s hyperparameters."""
    m64 = _model(torch.float64)[0]
    with torch.no_grad():
        for p, q in zip(m64.parameters(), model.parameters(), strict=True):
            p.copy_(q)
    m64.train()
    with torch.no_grad():
        return -gpytorch.mlls.ExactMarginalLogLikelihood(m64.likelihood, m64)(m64(*m64.train_inputs), m64.train_targets)


def test_float32_fit_reaches_the_float64_optimum():
    m64, xt, ft = _model(torch.float64)
    m32, _, _ = _model(torch.float32)
    with torch.no_grad():  # the same start: the float32 model's (rounded) initial values
        for p, q in zip(m64.parameters(), m32.parameters(), strict=True):
            p.copy_(q)
    fit_gpx_model(m64, max_iter=30)
    fit_gpx_model(m32, max_iter=30)
    assert all(p.dtype == torch.float32 for p in m32.parameters()) and not m32.training
    assert m32.fit_iterations == m64.fit_iterations
    for (name, p64), p32 in zip(m64.named_parameters(), m32.parameters(), strict=True):
        torch.testing.assert_close(p32.double(), p64, rtol=1e-5, atol=1e-6, msg=name)
    # the hyperparameters are as good (in float64) as the float64 fit's, and predictions as accurate
    assert _loss64(m32).item() <= _loss64(m64).item() + 1e-6
    with torch.no_grad():
        rmse64 = (m64(xt).mean - ft).pow(2).mean().sqrt()
        rmse32 = (m32(xt.float()).mean.double() - ft).pow(2).mean().sqrt()
    assert abs(rmse32 / rmse64 - 1) < 0.02, (rmse32, rmse64)


def test_float32_fit_in_float32_on_request():
    m32, _, _ = _model(torch.float32)
    fit_gpx_model(m32, max_iter=3, fit_dtype=torch.float32)
    assert all(p.dtype == torch.float32 for p in m32.parameters()) and len(m32.fit_history) > 0
