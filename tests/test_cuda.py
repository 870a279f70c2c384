"""The package on a CUDA device: every public path gives the CPU's float64 answer, on the device it was given.

Each test builds a model on the CPU in float64, moves a deep copy to ``cuda`` and compares what both compute.
The CPU results are themselves checked against dense brute force elsewhere in the suite; here GPX's latent
mean and covariance are also recomputed by hand, from :math:`\\mathbf C = \\sigma_y^2\\mathbf I + (\\mathbf K +
\\sigma_w^2\\mathbf I)\\odot\\mathbf Z\\mathbf Z^\\top`, on the CPU. The whole module is skipped on machines
without CUDA (CI has none); ``scripts/gpu_check.sh`` runs it on a GPU machine.
"""

from __future__ import annotations

import copy
import os

import gpytorch
import numpy as np
import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from gpytorch_explain import (
    GPXModel,
    PartitionedKernel,
    PosteriorGradient,
    PosteriorIntegratedGradients,
    VariationalGPXModel,
)

#: the device under test; GPYTORCH_EXPLAIN_TEST_DEVICE=cpu dry-runs the module's logic on a machine without CUDA
CUDA = torch.device(os.environ.get("GPYTORCH_EXPLAIN_TEST_DEVICE", "cuda"))
pytestmark = pytest.mark.skipif(CUDA.type == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device")

DT = torch.float64


def close(actual, expected, rtol, what):
    actual = torch.as_tensor(actual).detach().cpu().to(DT)
    expected = torch.as_tensor(expected).detach().cpu().to(DT)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-300)).item()
    assert err <= rtol, f"{what}: relative error {err:.2e} > {rtol:.0e}"


def data(n=60, D=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, D, dtype=DT, generator=gen) * 2 - 1
    y = x[:, 0] * torch.sin(3 * x[:, 1]) + 0.5 * x[:, 2] + 0.05 * torch.randn(n, dtype=DT, generator=gen)
    xs = torch.rand(7, D, dtype=DT, generator=gen) * 2 - 1
    return x, y, xs


def gpx_model(x, y, base_kernel=None):
    model = GPXModel(x, y, base_kernel=base_kernel)
    model.likelihood.noise = 0.03
    model.weight_noise = 0.02
    if base_kernel is None:
        model.base_kernel.outputscale = 0.8
        model.base_kernel.base_kernel.lengthscale = 0.7
    return model.eval()


def test_gpx_predictions_match_cpu_and_brute_force():
    x, y, xs = data()
    cpu = gpx_model(x, y)
    gpu = copy.deepcopy(cpu).to(CUDA)
    with torch.no_grad():
        ref, out = cpu(xs), gpu(xs.to(CUDA))
        w_ref, w_out = cpu.predict_weights(xs), gpu.predict_weights(xs.to(CUDA))
        e_ref, e_out = cpu.explain(xs), gpu.explain(xs.to(CUDA))
    assert out.mean.device.type == CUDA.type and w_out.mean.device.type == CUDA.type
    close(out.mean, ref.mean, 1e-9, "latent mean")
    close(out.covariance_matrix, ref.covariance_matrix, 1e-8, "latent covariance")
    close(w_out.mean, w_ref.mean, 1e-9, "weight means")
    close(w_out.variance, w_ref.variance, 1e-8, "weight variances")
    close(e_out.contributions_mean, e_ref.contributions_mean, 1e-9, "contributions")

    # by hand on the CPU: K from the RBF formula, C = sy2 I + (K + sw2 I) * Z Z^T, mean = (K* * Z* Z^T) C^-1 y
    ls, os_, sw2, sy2 = 0.7, 0.8, 0.02, 0.03

    def k(a, b):
        return os_ * torch.exp(-0.5 * torch.cdist(a, b).pow(2) / ls**2)

    C = sy2 * torch.eye(len(x), dtype=DT) + (k(x, x) + sw2 * torch.eye(len(x), dtype=DT)) * (x @ x.T)
    Ks = k(xs, x) * (xs @ x.T)
    mean = Ks @ torch.linalg.solve(C, y)
    cov = (k(xs, xs) + sw2 * torch.eye(len(xs), dtype=DT)) * (xs @ xs.T) - Ks @ torch.linalg.solve(C, Ks.T)
    close(out.mean, mean, 1e-7, "latent mean vs brute force")
    close(out.covariance_matrix, cov, 1e-6, "latent covariance vs brute force")


def test_gpx_marginal_likelihood_and_gradients_match_cpu():
    x, y, _ = data(seed=1)
    cpu = gpx_model(x, y).train()
    gpu = copy.deepcopy(cpu).to(CUDA).train()
    values = []
    for model in (cpu, gpu):
        model.zero_grad()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
        with gpytorch.settings.max_cholesky_size(10_000):
            loss = -mll(model(*model.train_inputs), model.train_targets)
        loss.backward()
        grads = torch.cat([p.grad.reshape(-1).cpu() for p in model.parameters()])
        values.append((loss.detach().cpu(), grads))
    close(values[1][0], values[0][0], 1e-10, "marginal likelihood")
    close(values[1][1], values[0][1], 1e-8, "its gradient")


def test_gpx_fit_on_cuda_reaches_the_cpu_optimum():
    x, y, xs = data(seed=2)
    cpu = GPXModel(x, y).fit()
    gpu = GPXModel(x.to(CUDA), y.to(CUDA)).fit()
    assert next(gpu.parameters()).device.type == CUDA.type
    losses = []
    for model in (cpu, gpu):
        model.train()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
        with torch.no_grad():
            losses.append(-mll(model(*model.train_inputs), model.train_targets).item())
    assert abs(losses[1] - losses[0]) <= 1e-4 * abs(losses[0]) + 1e-6, losses
    with torch.no_grad():
        close(gpu.eval()(xs.to(CUDA)).mean, cpu.eval()(xs).mean, 1e-3, "predictions after the fit")


def test_float32_gpx_on_cuda():
    x, y, xs = data(seed=3)
    gpu = gpx_model(x, y).to(device=CUDA, dtype=torch.float32)
    with torch.no_grad():
        out = gpu.explain(xs.to(CUDA, torch.float32))
        ref = gpx_model(x, y).explain(xs)
    assert out.contributions_mean.dtype == torch.float32
    close(out.contributions_mean, ref.contributions_mean, 1e-3, "float32 contributions")


def test_dense_cholesky_on_cuda():
    from gpytorch_explain.utils.dense_path import dense_cholesky

    x, y, _ = data(n=300, seed=4)
    model = gpx_model(x, y).to(CUDA).train()
    with torch.no_grad():
        covar = model.likelihood(model(*model.train_inputs)).lazy_covariance_matrix
        L = dense_cholesky(covar)
        ref = torch.linalg.cholesky(covar.to_dense().cpu())
    assert L.device.type == CUDA.type
    close(L.tril(), ref, 1e-9, "in-place dense Cholesky")


def test_partitioned_kernel_on_cuda():
    x, y, xs = data(n=500, seed=5)
    dense = ScaleKernel(RBFKernel(ard_num_dims=3)).to(DT)
    dense.base_kernel.lengthscale = torch.tensor([0.5, 0.8, 1.2], dtype=DT)
    lean = PartitionedKernel(copy.deepcopy(dense))
    v = torch.randn(500, 4, dtype=DT, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = dense(x) @ v
    out = lean.to(CUDA)(x.to(CUDA)) @ v.to(CUDA)
    assert out.device.type == CUDA.type
    close(out, ref, 1e-10, "lean kernel product")
    cpu_model = gpx_model(x, y, base_kernel=copy.deepcopy(dense))
    gpu_model = gpx_model(x, y, base_kernel=PartitionedKernel(copy.deepcopy(dense))).to(CUDA)
    with torch.no_grad():
        close(gpu_model(xs.to(CUDA)).mean, cpu_model(xs).mean, 1e-8, "GPX over the lean kernel")


class _ExactGP(gpytorch.models.ExactGP):
    def __init__(self, x, y):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = ScaleKernel(RBFKernel(ard_num_dims=x.size(-1)))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def test_attribution_gps_on_cuda():
    x, y, xs = data(seed=6)
    cpu = _ExactGP(x, y).to(DT)
    cpu.likelihood.noise = 0.02
    cpu.covar_module.base_kernel.lengthscale = torch.tensor([0.6, 0.9, 1.3], dtype=DT)
    cpu.mean_module.constant.data.fill_(0.1)
    cpu.eval()
    gpu = copy.deepcopy(cpu).to(CUDA).eval()
    baseline = torch.zeros(3, dtype=DT)
    with torch.no_grad():
        for make in (PosteriorGradient, lambda m: PosteriorIntegratedGradients(m, baseline=baseline.to(m_dev(m)))):
            ref, out = make(cpu)(xs), make(gpu)(xs.to(CUDA))
            assert out.mean.device.type == CUDA.type
            close(out.mean, ref.mean, 1e-8, "attribution mean")
            close(out.covariance_matrix, ref.covariance_matrix, 1e-7, "attribution covariance")
        gaps = PosteriorIntegratedGradients(gpu, baseline=baseline.to(CUDA)).completeness(xs.to(CUDA))
    assert gaps.mean_gap.abs().max() < 1e-7


def m_dev(model):
    return next(model.parameters()).device


def test_variational_gpx_on_cuda():
    x, y, xs = data(seed=7)
    cpu = VariationalGPXModel(x[::3].clone(), learn_inducing_locations=False)
    cpu.fit(x, y, num_epochs=3, batch_size=20, lr=0.05)
    gpu = copy.deepcopy(cpu).to(CUDA)
    cpu.eval()
    gpu.eval()
    with torch.no_grad():
        ref, out = cpu(xs), gpu(xs.to(CUDA))
        w_ref, w_out = cpu.predict_weights(xs), gpu.predict_weights(xs.to(CUDA))
    assert out.mean.device.type == CUDA.type
    close(out.mean, ref.mean, 1e-8, "variational GPX mean")
    close(out.variance, ref.variance, 1e-8, "variational GPX variance")
    close(w_out.mean, w_ref.mean, 1e-8, "variational weight means")


def test_gpx_botorch_posterior_on_cuda():
    x, y, xs = data(seed=8)
    cpu = gpx_model(x, y)
    gpu = copy.deepcopy(cpu).to(CUDA)
    with torch.no_grad():
        ref, out = cpu.posterior(xs), gpu.posterior(xs.to(CUDA))
    assert out.mean.device.type == CUDA.type
    close(out.mean, ref.mean, 1e-9, "BoTorch posterior mean")
    close(out.variance, ref.variance, 1e-8, "BoTorch posterior variance")


def test_local_explainer_calls_a_cuda_module_with_cuda_tensors():
    from gpytorch_explain import LocalGPExplainer

    seen = []

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1).to(DT)
            with torch.no_grad():
                self.lin.weight.copy_(torch.tensor([[1.0, -2.0, 0.0, 0.5]], dtype=DT))

        def forward(self, X):
            seen.append(X.device.type)
            return self.lin(X).squeeze(-1)

    gen = np.random.default_rng(0)
    train = gen.normal(size=(200, 4))
    net = Net()
    result = LocalGPExplainer(net.to(CUDA), train, acquisition="variance", budget=20, seed=0).explain(train[0])
    assert set(seen) == {CUDA.type}
    assert result.x_samples.shape == (20, 4) and result.gradient_mean.shape == (4,)
    np.testing.assert_array_equal(result.x_samples[0], train[0])
    # the values came back from the device unchanged (the BO path itself may differ from a CPU run's in the last
    # bits, and so pick another of the acquisition's near-equal maxima: not compared)
    with torch.no_grad():
        expected = net.cpu()(torch.as_tensor(result.x_samples)).numpy()
    np.testing.assert_allclose(result.y_samples, expected, rtol=1e-12, atol=1e-12)
