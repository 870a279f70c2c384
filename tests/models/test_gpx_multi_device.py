"""GPX over ``MultiDeviceKernel``: the base covariance arrives as GPyTorch's row-block ``CatLinearOperator`` (one block
per device, gathered on the output device). On CPU, GPyTorch's ``MultiDeviceKernel`` cannot run (``DataParallel``
without CUDA has no ``dim``), so the CPU tests use a subclass that splits the rows exactly as its ``forward`` does and
gathers them with its own ``gather``; with CUDA the real kernel runs on every visible GPU. References are dense
float64 brute force."""

import warnings

import gpytorch
import pytest
import torch
from gpytorch.kernels import Kernel, MultiDeviceKernel, RBFKernel, ScaleKernel
from linear_operator.operators import CatLinearOperator
from linear_operator.utils.warnings import NumericalWarning

from gpytorch_explain import GPXModel
from gpytorch_explain import settings as explain_settings

DT = torch.float64


class _RowBlockKernel(MultiDeviceKernel):
    """``MultiDeviceKernel`` with its row split and gather, but the blocks computed in turn (CPU ``DataParallel``
    cannot scatter).

    ``DataParallel.__init__`` is bypassed: with CUDA available it rejects CPU device ids ("Expected a non cpu
    device"), and without CUDA it leaves ``dim`` unset. Only the attributes ``gather`` and ``base_kernel`` read are
    set, so the emulation runs the same way on every machine.
    """

    def __init__(self, base_kernel, blocks: int):
        Kernel.__init__(self)
        self.module = base_kernel
        self.device_ids = [torch.device("cpu")] * blocks
        self.output_device = torch.device("cpu")
        self.dim = -2
        self.blocks = blocks

    def forward(self, x1, x2, diag=False, **kwargs):
        if diag:
            return self.module.forward(x1, x2, diag=True, **kwargs)
        chunks = x1.tensor_split(self.blocks, dim=-2)
        outputs = [self.module.forward(c, x2, **kwargs) for c in chunks if c.size(-2)]
        return self.gather(outputs, self.output_device)


def _data(n=90, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, dtype=DT, generator=gen)
    z = torch.randn(n, 2, dtype=DT, generator=gen)
    y = (torch.sin(x[:, :2]) * z).sum(-1) + 0.1 * torch.randn(n, dtype=DT, generator=gen)
    return x, y, z


def _model(base, x, y, z):
    lik = gpytorch.likelihoods.GaussianLikelihood().to(x)
    lik.noise = 0.02
    model = GPXModel(x, y, z, likelihood=lik, base_kernel=base).to(x)
    model.weight_noise = 0.03
    return model


def _base():
    k = ScaleKernel(RBFKernel(ard_num_dims=3))
    k.base_kernel.lengthscale = torch.tensor([[0.8, 1.2, 1.5]])
    k.outputscale = 1.3
    return k.to(DT)


def _dense_reference(model, x, z, xt):
    kernel = model.base_kernel.base_kernel  # the wrapped ScaleKernel(RBF)
    k = kernel(x, x).to_dense()
    n = x.size(0)
    eye = torch.eye(n, dtype=DT, device=x.device)
    c = model.likelihood.noise * eye + (k + model.weight_noise * eye) * (z @ z.T)
    k_sx = kernel(xt, x).to_dense()
    m, d = xt.size(0), z.size(1)
    b = (k_sx.T.unsqueeze(-1) * z.unsqueeze(1)).reshape(n, m * d)
    prior = kernel(xt, xt, diag=True).to_dense().repeat_interleave(d) + model.weight_noise
    return c, b, prior


@pytest.mark.parametrize("dense_limit", [0, 10_000])
def test_gpx_over_row_blocks_matches_dense(dense_limit):
    x, y, z = _data()
    model = _model(_RowBlockKernel(_base(), blocks=3), x, y, z)
    model.train()
    inputs = model.train_inputs[0]
    base_op = model.base_kernel(x, x).evaluate_kernel()
    assert isinstance(base_op, CatLinearOperator)  # what MultiDeviceKernel hands GPX
    params = [p for p in model.parameters() if p.requires_grad]
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    c, b, prior = _dense_reference(model, x, z, x[:4])
    dense = torch.distributions.MultivariateNormal(torch.zeros_like(y), c).log_prob(y) / y.numel()
    ref_grads = torch.autograd.grad(dense, params)
    torch.testing.assert_close(
        model.covar_module(inputs).to_dense(), c - model.likelihood.noise * torch.eye(90, dtype=DT), rtol=1e-10, atol=0
    )
    if dense_limit:  # Cholesky: exact to round-off
        with gpytorch.settings.max_cholesky_size(dense_limit), explain_settings.max_cholesky_size(dense_limit):
            value = mll(model(x, z), y)
        grads = torch.autograd.grad(value, params)
        torch.testing.assert_close(value, dense, rtol=1e-9, atol=1e-10)
        for g, r in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-8)

    model.eval()
    xt = 0.7 * torch.randn(5, 3, dtype=DT, generator=torch.Generator().manual_seed(3))
    with (
        torch.no_grad(),
        gpytorch.settings.max_cholesky_size(dense_limit),
        explain_settings.max_cholesky_size(dense_limit),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", NumericalWarning)  # CG may stop at its iteration cap near 1e-6 residual
        post = model.predict_weights(xt)
    assert post.lazy_covariance_matrix.factor_type == ("cholesky" if dense_limit else "solve")
    c, b, prior = _dense_reference(model, x, z, xt)
    ref_mean = (b.T @ torch.linalg.solve(c, y)).reshape(5, 2)
    ref_var = (prior - (b * torch.linalg.solve(c, b)).sum(0)).reshape(5, 2)
    # Cholesky: round-off; CG: GPX's derived-solve tolerance (as in test_gpx_iterative_paths)
    tol = 1e-8 if dense_limit else 1e-4
    torch.testing.assert_close(post.mean, ref_mean, rtol=0, atol=tol * ref_mean.abs().max().item())
    torch.testing.assert_close(post.variance, ref_var, rtol=0, atol=tol * ref_var.abs().max().item())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="MultiDeviceKernel needs CUDA")
def test_gpx_over_multi_device_kernel_on_gpus():
    devices = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    x, y, z = (t.to(devices[0]) for t in _data(n=300))
    base = MultiDeviceKernel(_base(), device_ids=devices, output_device=devices[0]).to(devices[0])
    model = _model(base, x, y, z)
    model.eval()
    xt = 0.7 * torch.randn(5, 3, dtype=DT, device=devices[0])
    with torch.no_grad(), gpytorch.settings.max_cholesky_size(0), explain_settings.max_cholesky_size(0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumericalWarning)
            post = model.predict_weights(xt)
        c, b, prior = _dense_reference(model, x, z, xt)
    ref_mean = (b.T @ torch.linalg.solve(c, y)).reshape(5, 2)
    ref_var = (prior - (b * torch.linalg.solve(c, b)).sum(0)).reshape(5, 2)
    assert post.mean.device == devices[0]
    torch.testing.assert_close(post.mean, ref_mean, rtol=0, atol=1e-4 * ref_mean.abs().max().item())
    torch.testing.assert_close(post.variance, ref_var, rtol=0, atol=1e-4 * ref_var.abs().max().item())
