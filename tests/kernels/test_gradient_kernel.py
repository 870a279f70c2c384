"""GPyTorch's BaseKernelTestCase for GradientKernel (the covariance of posterior gradients of an RBF GP), in float64.

The battery checks the kernel's GPyTorch contract (batches of inputs and of hyperparameters, ``diag=True``,
``active_dims``, indexing a batch kernel, pickling, dtype/device). The values themselves are checked against
autograd elsewhere (test_attribution_rbf.py, test_attribution_generic.py).
"""

import unittest

import torch
from gpytorch.kernels import RBFKernel
from gpytorch.test.base_kernel_test_case import BaseKernelTestCase

from gpytorch_explain.attribution import GradientKernel


class TestGradientKernel(BaseKernelTestCase, unittest.TestCase):
    seed = 0

    def setUp(self):
        self._default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        super().setUp()

    def tearDown(self):
        super().tearDown()
        torch.set_default_dtype(self._default_dtype)

    def create_data_double_batch(self):
        return torch.randn(3, 2, 12, 2)  # 12 points per batch (the battery's 50 make 6 kernel matrices of 100 x 100)

    def create_data_no_batch(self):
        return torch.randn(12, 10)  # only the active_dims cases use it; 12 points keep their 48 x 48 matrices small

    def create_kernel_no_ard(self, batch_shape=(), **kwargs):
        return GradientKernel(RBFKernel(batch_shape=torch.Size(batch_shape)), **kwargs)

    def create_kernel_ard(self, num_dims, batch_shape=(), **kwargs):
        return GradientKernel(RBFKernel(ard_num_dims=num_dims, batch_shape=torch.Size(batch_shape)), **kwargs)

    def test_outputs_are_interleaved_by_point(self):
        kernel = self.create_kernel_no_ard()
        x = torch.randn(4, 3)
        assert kernel(x).shape == torch.Size([12, 12])
        assert kernel.num_outputs_per_input(x, x) == 3
