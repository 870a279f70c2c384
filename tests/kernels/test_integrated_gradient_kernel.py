"""GPyTorch's BaseKernelTestCase for IntegratedGradientKernel (covariance of integrated-gradient attributions of an
RBF GP, closed form), in float64.

The battery checks the kernel's GPyTorch contract (batches of inputs and of hyperparameters, ``diag=True``,
``active_dims``, indexing a batch kernel, pickling, dtype/device). The values themselves are checked against
quadrature and autograd elsewhere (test_attribution_rbf.py, test_attribution_generic.py).
"""

import unittest

import torch
from gpytorch.kernels import RBFKernel
from gpytorch.test.base_kernel_test_case import BaseKernelTestCase

from gpytorch_explain.attribution import IntegratedGradientKernel


class TestIntegratedGradientKernel(BaseKernelTestCase, unittest.TestCase):
    seed = 0
    num_dims = 2  # the batch cases' inputs have 2 columns

    def setUp(self):
        self._default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        super().setUp()

    def tearDown(self):
        super().tearDown()
        torch.set_default_dtype(self._default_dtype)

    def create_data_double_batch(self):
        return torch.randn(3, 2, 8, 2)  # 8 points per batch (the battery's 50 make 6 kernel matrices of 100 x 100)

    def create_data_no_batch(self):
        return torch.randn(12, 10)  # only the active_dims cases use it; 12 points keep their matrices small

    def _baselines(self, num_dims):
        return torch.linspace(-0.5, 0.5, num_dims)

    def create_kernel_no_ard(self, batch_shape=(), num_dims=None, **kwargs):
        # the baselines live in the space the kernel sees: after active_dims
        active = kwargs.get("active_dims")
        num_dims = num_dims or (len(active) if active is not None else self.num_dims)
        base = RBFKernel(batch_shape=torch.Size(batch_shape))
        return IntegratedGradientKernel(base, self._baselines(num_dims), **kwargs)

    def create_kernel_ard(self, num_dims, batch_shape=(), **kwargs):
        base = RBFKernel(ard_num_dims=num_dims, batch_shape=torch.Size(batch_shape))
        return IntegratedGradientKernel(base, self._baselines(num_dims), **kwargs)

    # The two active_dims cases compare with a kernel on the sliced inputs; its baselines must have as many entries
    # as those inputs have columns (4 and 6 here), so the reference kernel is built for that width. Same check.
    def _check_active_dims(self, dims):
        kernel = self.create_kernel_no_ard(active_dims=dims)
        x = self.create_data_no_batch()
        res = kernel(x).evaluate_kernel().to_dense()
        expected = self.create_kernel_no_ard(num_dims=len(dims))(x[:, dims]).evaluate_kernel().to_dense()
        self.assertAllClose(res, expected, rtol=1e-3, atol=1e-5)

    def test_active_dims_list(self):
        self._check_active_dims([0, 2, 4, 6])

    def test_active_dims_range(self):
        self._check_active_dims(list(range(3, 9)))
